// static serves a file of the function's root file system (a network
// workload of the serverless-on-the-edge paper): GET / sends /data.bin
// (apps/functions/build.sh makes a 50 MiB one), GET /NAME sends /NAME.
package main

import (
	"net/http"
	"os"
	"strings"

	"shoal.dev/functions/fnhttp"
)

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if strings.Contains(path, "..") {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if path == "/" {
			path = "/data.bin"
		}
		f, err := os.Open(fnhttp.Root() + path)
		if err != nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
}
