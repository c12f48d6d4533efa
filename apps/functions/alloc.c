/* alloc: allocates 50 MiB (?mb=, at most 1024) and writes every page, then
 * frees it (a memory workload of the serverless-on-the-edge paper, its section 4). */
#include "fn_http.h"
#include <stdlib.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)body, (void)len;
	long mb = fn_query_long(query, "mb", 50);
	if (mb < 1 || mb > 1024) {
		r->status = 400;
		fn_printf(r, "mb must be between 1 and 1024\n");
		return 0;
	}
	size_t n = (size_t)mb << 20;
	volatile char *p = malloc(n);
	if (!p) {
		r->status = 500;
		fn_printf(r, "out of memory\n");
		return 0;
	}
	for (size_t i = 0; i < n; i += 4096)
		p[i] = (char)(i >> 12);
	unsigned long sum = 0;
	for (size_t i = 0; i < n; i += 4096)
		sum += (unsigned char)p[i];
	free((void *)p);
	fn_printf(r, "allocated %zu bytes, touched %zu pages, sum %lu\n", n, n / 4096, sum);
	return 0;
}
