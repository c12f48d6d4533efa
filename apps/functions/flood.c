/* flood: a test function for the gateway's output limits
 * (crates/shoal-cli/tests/serve.rs): `?mb=N` writes N MiB of 'x' to
 * stdout without a newline, then answers "flooded N MiB". Not built by
 * build.sh. */
#include "fn_http.h"
#include <string.h>
#include <unistd.h>

static char chunk[1 << 20];

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)body, (void)len;
	long mb = fn_query_long(query, "mb", 1);
	memset(chunk, 'x', sizeof chunk);
	for (long i = 0; i < mb; i++) {
		size_t done = 0;
		while (done < sizeof chunk) {
			ssize_t w = write(1, chunk + done, sizeof chunk - done);
			if (w <= 0) {
				r->status = 500;
				fn_printf(r, "write failed after %ld MiB\n", i);
				return 0;
			}
			done += (size_t)w;
		}
	}
	fn_printf(r, "flooded %ld MiB\n", mb);
	return 0;
}
