/* A tiny multi-call program for the opencontainers runtime-tools
 * validation tests (scripts/oci-validate), which run `true`, `sleep N` and
 * `ls` from their bundle's root file system: the same shoal image is
 * installed under each name and acts by the name it was started as.
 * The tests also place their in-container checker `runtimetest` (a Linux
 * program) in the bundle; the two tests that need it here
 * (delete_resources, delete_only_create_resources) check host-side
 * resources only, so it is this program too, and does what `true` does. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *name = strrchr(argv[0], '/');
	name = name ? name + 1 : argv[0];
	if (strcmp(name, "true") == 0 || strcmp(name, "runtimetest") == 0)
		return 0;
	if (strcmp(name, "sleep") == 0) {
		unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
		while (n > 0)
			n = sleep(n);
		return 0;
	}
	if (strcmp(name, "ls") == 0) {
		DIR *d = opendir(argc > 1 ? argv[1] : ".");
		struct dirent *e;
		if (!d) {
			perror("ls");
			return 1;
		}
		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				puts(e->d_name);
		closedir(d);
		return 0;
	}
	fprintf(stderr, "%s: not one of true, sleep, ls, runtimetest\n", name);
	return 127;
}
