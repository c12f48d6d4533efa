/* fileread: reads /data.bin of the function's root file system (50 MiB
 * from apps/functions/build.sh) into memory and answers its size and a
 * checksum (a file-system workload of the serverless-on-the-edge paper, its section 4). */
#include "fn_http.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)query, (void)body, (void)len;
	char full[4096];
	snprintf(full, sizeof full, "%s/data.bin", fn_root());
	int f = open(full, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (f < 0 || fstat(f, &st) < 0) {
		if (f >= 0)
			close(f);
		r->status = 404;
		fn_printf(r, "no /data.bin\n");
		return 0;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(f, buf + got, (size_t)st.st_size - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(f);
	unsigned long sum = 0;
	for (size_t i = 0; buf && i < got; i++)
		sum = sum * 31 + (unsigned char)buf[i];
	free(buf);
	fn_printf(r, "read %zu bytes, checksum %lu\n", got, sum);
	return 0;
}
