/* sleep (a test helper): answers after ?ms= milliseconds (default 100);
 * with ?stall=MS it sends the head at once and the body MS later (a
 * response that is slow to finish). With a request body it echoes the
 * body instead (for streaming tests). */
#include "fn_http.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path;
	if (len) {
		char *copy = malloc(len);
		if (!copy)
			return -1;
		memcpy(copy, body, len);
		r->body = copy;
		r->len = len;
		r->body_free = 1;
		r->type = "application/octet-stream";
		return 0;
	}
	long stall = fn_query_long(query, "stall", 0);
	if (stall > 0) {
		r->body_delay_ms = stall;
		fn_printf(r, "stalled %ld ms\n", stall);
		return 0;
	}
	long ms = fn_query_long(query, "ms", 100);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	fn_printf(r, "slept %ld ms\n", ms);
	return 0;
}
