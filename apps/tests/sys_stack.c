/* RLIMIT_STACK: the hard limit is unlimited as on
 * Linux, so a program may raise the soft limit above 8 MiB; what is set is
 * what is reported. Prints the same natively and on shoal. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define MiB (1024UL * 1024)

static void show(const char *what)
{
	struct rlimit r;
	getrlimit(RLIMIT_STACK, &r);
	printf("%-28s soft %s%lu MiB, hard %s\n", what, r.rlim_cur == RLIM_INFINITY ? "unlimited " : "",
	       r.rlim_cur == RLIM_INFINITY ? 0UL : (unsigned long)(r.rlim_cur / MiB),
	       r.rlim_max == RLIM_INFINITY ? "unlimited" : "limited");
}

static void set(rlim_t cur, rlim_t max)
{
	struct rlimit r = { cur, max };
	int rc = setrlimit(RLIMIT_STACK, &r);
	printf("setrlimit(%lu MiB, %s): %d %s\n", cur == RLIM_INFINITY ? 0UL : (unsigned long)(cur / MiB),
	       max == RLIM_INFINITY ? "unlimited" : "limited", rc, rc ? strerror(errno) : "");
}

int main(void)
{
	struct rlimit r;
	getrlimit(RLIMIT_STACK, &r);
	printf("default hard unlimited: %s\n", r.rlim_max == RLIM_INFINITY ? "yes" : "no");
	set(16 * MiB, RLIM_INFINITY);
	show("after 16 MiB");
	set(64 * MiB, RLIM_INFINITY);
	show("after 64 MiB");
	set(RLIM_INFINITY, RLIM_INFINITY);
	show("after unlimited");
	set(32 * MiB, 16 * MiB);
	show("after soft > hard");
	set(8 * MiB, RLIM_INFINITY);
	show("back to 8 MiB");
	return 0;
}
