// fileread reads /data.bin of the function's root file system (50 MiB from
// apps/functions/build.sh) into memory and answers its size and the same
// checksum as fileread.c (a file-system workload of the
// serverless-on-the-edge paper).
package main

import (
	"fmt"
	"net/http"
	"os"

	"shoal.dev/functions/fnhttp"
)

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		data, err := os.ReadFile(fnhttp.Root() + "/data.bin")
		if err != nil {
			http.Error(w, "no /data.bin", http.StatusNotFound)
			return
		}
		var sum uint64
		for _, b := range data {
			sum = sum*31 + uint64(b)
		}
		fmt.Fprintf(w, "read %d bytes, checksum %d\n", len(data), sum)
	})
}
