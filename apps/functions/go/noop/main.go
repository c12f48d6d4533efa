// noop answers at once: the gateway's overhead (the serverless-on-the-edge
// paper's minimal function), in Go.
package main

import (
	"net/http"

	"shoal.dev/functions/fnhttp"
)

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("noop\n"))
	})
}
