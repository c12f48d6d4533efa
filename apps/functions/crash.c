/* crash (a test helper): GET /crash writes through a null pointer (the
 * instance dies: SIGSEGV natively, a guest page fault under shoal); GET
 * /drop closes the connection without an answer (the instance lives on,
 * as an overloaded one does); any other path answers "alive". */
#include "fn_http.h"
#include <string.h>
#include <unistd.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)query, (void)body, (void)len;
	if (!strcmp(path, "/crash")) {
		*(volatile int *)0 = 1;
		return -1;
	}
	if (!strcmp(path, "/drop"))
		return -1;
	fn_printf(r, "alive\n");
	return 0;
}
