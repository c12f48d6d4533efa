/* fib: the n-th Fibonacci number, computed the slow recursive way (a pure
 * CPU workload of the serverless-on-the-edge paper, its section 4). GET /?n=N, default 30, at most 45. */
#include "fn_http.h"

static long fib(long n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)body, (void)len;
	long n = fn_query_long(query, "n", 30);
	if (n < 0 || n > 45) {
		r->status = 400;
		fn_printf(r, "n must be between 0 and 45\n");
		return 0;
	}
	fn_printf(r, "fib(%ld) = %ld\n", n, fib(n));
	return 0;
}
