/* Exhausting memory: malloc until NULL, a huge mmap, and pthread_create
 * while memory is exhausted all fail cleanly with ENOMEM/EAGAIN; after
 * freeing everything, allocation works again. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *nothing(void *arg) { return arg; }

int main(void)
{
	void *p = mmap(0, (size_t)1 << 40, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("huge mmap: %s\n", p == MAP_FAILED && errno == ENOMEM ? "ENOMEM" : "unexpected");

	void **blocks = 0;
	size_t n = 0, cap = 0, total = 0;
	for (;;) {
		void *b = malloc(1 << 20);
		if (!b) break;
		memset(b, 1, 1 << 20);
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			void **nb = realloc(blocks, nc * sizeof *nb);
			if (!nb) { free(b); break; }
			blocks = nb;
			cap = nc;
		}
		blocks[n++] = b;
		total += 1 << 20;
	}
	printf("malloc until NULL: errno %s, got at least 16 MiB: %s\n", errno == ENOMEM ? "ENOMEM" : "other", total >= (16u << 20) ? "yes" : "no");
	/* Fill the rest with small blocks. */
	size_t small = 0;
	void *s, *chain = 0;
	while ((s = malloc(4096))) { *(void **)s = chain; chain = s; small++; }
	pthread_t t;
	int e = pthread_create(&t, 0, nothing, 0);
	printf("pthread_create with no memory: %s\n", e == EAGAIN ? "EAGAIN" : e == 0 ? "ok" : "other");
	if (e == 0) pthread_join(t, 0);
	while (chain) { s = chain; chain = *(void **)s; free(s); }
	for (size_t i = 0; i < n; i++) free(blocks[i]);
	free(blocks);
	void *again = malloc(8 << 20);
	printf("after free, malloc 8 MiB: %s\n", again ? "ok" : "NULL");
	e = pthread_create(&t, 0, nothing, (void *)5);
	void *r = 0;
	if (!e) pthread_join(t, &r);
	printf("pthread_create after free: %s %ld\n", e ? "failed" : "ok", (long)r);
	return 0;
}
