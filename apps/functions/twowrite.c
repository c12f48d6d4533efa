/* twowrite: noop's answer, but its head and body go out in two write()
 * calls with Nagle's algorithm left on, as many small servers answer. The
 * body then waits for the ACK of the head; a peer that delays that ACK
 * adds up to 40 ms per request (`shoal bench faas --only two-write`
 * compares it with noop through the gateway). */
#include "fn_http.h"

/* No TCP_NODELAY on its connections (see fn_http.h). */
const int fn_nagle = 1;

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)query, (void)body, (void)len;
	r->body = "noop\n";
	r->len = 5;
	r->two_writes = 1;
	return 0;
}
