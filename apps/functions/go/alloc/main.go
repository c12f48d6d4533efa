// alloc allocates 50 MiB (?mb=, at most 1024), writes every page, then lets
// it go (a memory workload of the serverless-on-the-edge paper), as
// alloc.c does.
package main

import (
	"fmt"
	"net/http"

	"shoal.dev/functions/fnhttp"
)

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		mb, ok := fnhttp.QueryBounded(w, r, "mb", 50, 1, 1024)
		if !ok {
			return
		}
		n := mb << 20
		p := make([]byte, n)
		for i := int64(0); i < n; i += 4096 {
			p[i] = byte(i >> 12)
		}
		var sum uint64
		for i := int64(0); i < n; i += 4096 {
			sum += uint64(p[i])
		}
		fmt.Fprintf(w, "allocated %d bytes, touched %d pages, sum %d\n", n, n/4096, sum)
	})
}
