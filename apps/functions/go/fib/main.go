// fib computes the n-th Fibonacci number the slow recursive way (a pure
// CPU workload of the serverless-on-the-edge paper). GET /?n=N, default 30,
// at most 45.
package main

import (
	"fmt"
	"net/http"

	"shoal.dev/functions/fnhttp"
)

func fib(n int64) int64 {
	if n < 2 {
		return n
	}
	return fib(n-1) + fib(n-2)
}

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		n, ok := fnhttp.QueryBounded(w, r, "n", 30, 0, 45)
		if !ok {
			return
		}
		fmt.Fprintf(w, "fib(%d) = %d\n", n, fib(n))
	})
}
