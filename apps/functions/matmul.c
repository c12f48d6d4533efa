/* matmul: multiplies two n x n matrices of doubles (default 1024, ?n=, at
 * most 2048) and answers the sum of the product (a CPU and memory
 * bandwidth workload of the serverless-on-the-edge paper, its section 4). */
#include "fn_http.h"
#include <stdlib.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)body, (void)len;
	long n = fn_query_long(query, "n", 1024);
	if (n < 1 || n > 2048) {
		r->status = 400;
		fn_printf(r, "n must be between 1 and 2048\n");
		return 0;
	}
	size_t nn = (size_t)n * (size_t)n;
	double *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = calloc(nn, sizeof *c);
	if (!a || !b || !c) {
		free(a), free(b), free(c);
		r->status = 500;
		fn_printf(r, "out of memory\n");
		return 0;
	}
	for (size_t i = 0; i < nn; i++) {
		a[i] = (double)(i % 7) + 1.0;
		b[i] = (double)(i % 5) - 1.0;
	}
	/* i-k-j order: the inner loop walks rows of b and c. */
	for (long i = 0; i < n; i++)
		for (long k = 0; k < n; k++) {
			double x = a[i * n + k];
			for (long j = 0; j < n; j++)
				c[i * n + j] += x * b[k * n + j];
		}
	double sum = 0;
	for (size_t i = 0; i < nn; i++)
		sum += c[i];
	free(a), free(b), free(c);
	fn_printf(r, "matmul %ld sum %.1f\n", n, sum);
	return 0;
}
