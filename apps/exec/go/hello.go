// hello: a Go net/http server answering "hello" on the address given
// (default :8080), for `shoal bench exec` (throughput, start to first
// byte, idle memory) natively and as `shoal run`.
package main

import (
	"net/http"
	"os"
)

func main() {
	addr := ":8080"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("hello\n"))
	})
	if err := http.ListenAndServe(addr, nil); err != nil {
		os.Stderr.WriteString("hello: " + err.Error() + "\n")
		os.Exit(1)
	}
}
