// matmul multiplies two n x n matrices of float64 (default 1024, ?n=, at
// most 2048) and answers the sum of the product (a CPU and memory
// bandwidth workload of the serverless-on-the-edge paper), with the same
// inputs and loop order as matmul.c.
package main

import (
	"fmt"
	"net/http"

	"shoal.dev/functions/fnhttp"
)

func main() {
	fnhttp.Serve(func(w http.ResponseWriter, r *http.Request) {
		n, ok := fnhttp.QueryBounded(w, r, "n", 1024, 1, 2048)
		if !ok {
			return
		}
		nn := n * n
		a, b, c := make([]float64, nn), make([]float64, nn), make([]float64, nn)
		for i := int64(0); i < nn; i++ {
			a[i] = float64(i%7) + 1.0
			b[i] = float64(i%5) - 1.0
		}
		// i-k-j order: the inner loop walks rows of b and c.
		for i := int64(0); i < n; i++ {
			for k := int64(0); k < n; k++ {
				x := a[i*n+k]
				row, out := b[k*n:(k+1)*n], c[i*n:(i+1)*n]
				for j := range out {
					out[j] += x * row[j]
				}
			}
		}
		sum := 0.0
		for _, v := range c {
			sum += v
		}
		fmt.Fprintf(w, "matmul %d sum %.1f\n", n, sum)
	})
}
