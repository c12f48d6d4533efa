/* files: exercises a file system the way an ordinary program does:
 *   files WORKDIR [INPUT]
 * creates, writes, reads back, lists, renames, truncates and unlinks files
 * and directories under WORKDIR, then prints INPUT (a file from the root
 * file system given to `shoal run --fs`). Names are printed relative to
 * WORKDIR and listings sorted, so the output does not depend on where the
 * directory is or in which order the file system returns entries. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static char base[4096];

static const char *p(const char *name)
{
	static char buf[2][8192];
	static int which;
	which ^= 1;
	snprintf(buf[which], sizeof buf[which], "%s/%s", base, name);
	return buf[which];
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list(const char *name)
{
	DIR *d = opendir(p(name));
	if (!d) {
		printf("opendir %s: %s\n", name, strerror(errno));
		return;
	}
	char *names[256];
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < 256)
		names[n++] = strdup(e->d_name);
	closedir(d);
	qsort(names, n, sizeof *names, cmp);
	printf("ls %s:", name);
	for (int i = 0; i < n; i++) {
		struct stat st;
		char rel[512];
		snprintf(rel, sizeof rel, "%s/%s", name, names[i]);
		if (stat(p(rel), &st) == 0)
			printf(" %s(%s,%lld)", names[i], S_ISDIR(st.st_mode) ? "dir" : "file",
			       S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
		free(names[i]);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: files WORKDIR [INPUT]\n");
		return 2;
	}
	snprintf(base, sizeof base, "%s", argv[1]);
	if (mkdir(base, 0755) != 0 && errno != EEXIST) {
		printf("mkdir base: %s\n", strerror(errno));
		return 1;
	}
	mkdir(p("dir"), 0755);
	printf("mkdir again: %s\n", mkdir(p("dir"), 0755) == 0 ? "ok" : strerror(errno));

	FILE *f = fopen(p("dir/a.txt"), "w");
	for (int i = 0; i < 100; i++)
		fprintf(f, "line %d\n", i);
	fclose(f);

	int fd = open(p("dir/b.bin"), O_CREAT | O_RDWR | O_TRUNC, 0644);
	char buf[10000];
	for (int i = 0; i < (int)sizeof buf; i++)
		buf[i] = (char)(i * 7);
	struct iovec iov[2] = {{buf, 4000}, {buf + 4000, 6000}};
	printf("writev: %zd\n", writev(fd, iov, 2));
	printf("lseek end: %lld\n", (long long)lseek(fd, 0, SEEK_END));
	printf("pwrite at 20000: %zd\n", pwrite(fd, "tail", 4, 20000));
	struct stat st;
	fstat(fd, &st);
	printf("size after sparse write: %lld\n", (long long)st.st_size);
	char back[10000];
	printf("pread: %zd\n", pread(fd, back, sizeof back, 0));
	printf("content matches: %s\n", memcmp(buf, back, sizeof buf) == 0 ? "yes" : "no");
	char hole[4];
	pread(fd, hole, 4, 15000);
	printf("hole is zero: %s\n", (hole[0] | hole[1] | hole[2] | hole[3]) == 0 ? "yes" : "no");
	printf("ftruncate: %d\n", ftruncate(fd, 5000));
	fstat(fd, &st);
	printf("size after truncate: %lld\n", (long long)st.st_size);
	close(fd);

	fd = open(p("dir/a.txt"), O_WRONLY | O_APPEND);
	write(fd, "appended\n", 9);
	close(fd);

	list("dir");
	printf("rename: %d\n", rename(p("dir/a.txt"), p("dir/c.txt")));
	printf("open old name: %s\n", open(p("dir/a.txt"), O_RDONLY) < 0 ? strerror(errno) : "opened?!");
	mkdir(p("dir/sub"), 0700);
	printf("rmdir non-empty parent: %s\n", rmdir(p("dir")) == 0 ? "ok?!" : strerror(errno));
	printf("excl create existing: %s\n", open(p("dir/c.txt"), O_CREAT | O_EXCL | O_WRONLY, 0644) < 0 ? strerror(errno) : "opened?!");
	list("dir");
	f = fopen(p("dir/c.txt"), "r");
	int lines = 0;
	char line[64], last[64] = "";
	while (fgets(line, sizeof line, f)) {
		lines++;
		strcpy(last, line);
	}
	fclose(f);
	printf("c.txt: %d lines, last: %s", lines, last);
	printf("unlink c: %d\n", unlink(p("dir/c.txt")));
	printf("unlink b: %d\n", unlink(p("dir/b.bin")));
	printf("unlink missing: %s\n", unlink(p("dir/b.bin")) == 0 ? "ok?!" : strerror(errno));
	printf("rmdir sub: %d\n", rmdir(p("dir/sub")));
	list("dir");
	printf("rmdir dir: %d\n", rmdir(p("dir")));
	char cwd[4096];
	printf("chdir: %d\n", chdir(base));
	printf("getcwd works: %s\n", getcwd(cwd, sizeof cwd) ? "yes" : "no");
	fd = open("relative.txt", O_CREAT | O_WRONLY, 0600);
	close(fd);
	printf("relative path lands in cwd: %s\n", access(p("relative.txt"), F_OK) == 0 ? "yes" : "no");
	unlink("relative.txt");
	if (argc > 2) {
		FILE *in = fopen(argv[2], "r");
		if (!in) {
			printf("input: %s\n", strerror(errno));
		} else {
			printf("input:\n");
			while (fgets(line, sizeof line, in))
				printf("  %s", line);
			fclose(in);
		}
	}
	return 0;
}
