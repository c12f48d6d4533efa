// httpd is an ordinary Go program for the "ordinary images" tests and
// benches (crates/shoal-oci/tests/cri.rs, `shoal bench cri`): a static
// net/http server, built with CGO_ENABLED=0 and packed alone into a
// `FROM scratch` image, as Go services are shipped. It listens on the port
// given as its first argument (default 8080) and answers every GET with
// "hello from go PATH" and the working directory and uid it runs with, so
// a test can check what the container's config gave it.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	port := "8080"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		wd, _ := os.Getwd()
		fmt.Fprintf(w, "hello from go %s (cwd %s, uid %d)\n", r.URL.Path, wd, os.Getuid())
	})
	fmt.Printf("listening on %s\n", port)
	if err := http.ListenAndServe(":"+port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
