/* noop: answers at once (the serverless-on-the-edge paper's minimal function; the gateway's overhead). */
#include "fn_http.h"

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)query, (void)body, (void)len;
	r->body = "noop\n";
	r->len = 5;
	return 0;
}
