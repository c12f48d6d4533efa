/* static: serves a file of the function's root file system (a network
 * workload of the serverless-on-the-edge paper, its section 4): GET / sends /data.bin (apps/functions/build.sh
 * makes a 50 MiB one), GET /NAME sends /NAME. Under shoal the root is the
 * archive given with --fs (the gateway's per-function `fs`); natively it
 * is $FN_ROOT. */
#include "fn_http.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)query, (void)body, (void)len;
	static __thread char full[4096];
	if (strstr(path, "..")) {
		r->status = 404;
		fn_printf(r, "not found\n");
		return 0;
	}
	snprintf(full, sizeof full, "%s%s", fn_root(), strcmp(path, "/") ? path : "/data.bin");
	r->file = full;
	r->type = "application/octet-stream";
	return 0;
}
