/* auxv: what a static glibc program reads from the auxiliary vector
 * (getauxval) and what glibc derived from it; the same as on Linux. */
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#ifndef AT_MINSIGSTKSZ
#define AT_MINSIGSTKSZ 51
#endif

int main(int argc, char **argv)
{
	const char *execfn = (const char *)getauxval(AT_EXECFN);
	printf("AT_PLATFORM %s\n", (const char *)getauxval(AT_PLATFORM));
	printf("AT_EXECFN is argv[0]: %s\n", execfn && strcmp(execfn, argv[0]) == 0 ? "yes" : "no");
	printf("AT_HWCAP2 FSGSBASE: %lu\n", getauxval(AT_HWCAP2) & 2);
	printf("AT_MINSIGSTKSZ at least 1 KiB: %s\n", getauxval(AT_MINSIGSTKSZ) >= 1024 ? "yes" : "no");
	printf("AT_SECURE %lu, AT_PAGESZ %lu, AT_CLKTCK %lu, sysconf(_SC_CLK_TCK) %ld\n", getauxval(AT_SECURE), getauxval(AT_PAGESZ),
	       getauxval(AT_CLKTCK), sysconf(_SC_CLK_TCK));
	printf("AT_ENTRY set: %s, AT_PHDR set: %s, AT_RANDOM set: %s\n", getauxval(AT_ENTRY) ? "yes" : "no", getauxval(AT_PHDR) ? "yes" : "no",
	       getauxval(AT_RANDOM) ? "yes" : "no");
	return 0;
}
