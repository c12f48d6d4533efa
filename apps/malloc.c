/* malloc: a heavy malloc/free/realloc/calloc workload with a deterministic
 * pseudo-random pattern; prints a checksum of everything it read back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state = 88172645463325252ULL;
static uint64_t rnd(void)
{
	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return state;
}

#define SLOTS 4096

int main(void)
{
	static unsigned char *slot[SLOTS];
	static size_t len[SLOTS];
	uint64_t sum = 0;
	long ops = 0;
	for (int round = 0; round < 400000; round++) {
		int i = rnd() % SLOTS;
		if (slot[i]) {
			for (size_t k = 0; k < len[i]; k += 61)
				sum = sum * 31 + slot[i][k];
			if (rnd() % 4 == 0) {
				size_t n = 1 + rnd() % 5000;
				unsigned char *q = realloc(slot[i], n);
				if (!q)
					return 1;
				if (n > len[i])
					memset(q + len[i], (int)(n & 0xff), n - len[i]);
				slot[i] = q;
				len[i] = n;
			} else {
				free(slot[i]);
				slot[i] = 0;
			}
		} else {
			size_t n = rnd() % 16 == 0 ? 1 + rnd() % 300000 : 1 + rnd() % 512;
			if (rnd() % 3 == 0) {
				slot[i] = calloc(n, 1);
				for (size_t k = 0; k < n; k += 97)
					if (slot[i][k])
						return 2;
			} else {
				slot[i] = malloc(n);
			}
			if (!slot[i])
				return 1;
			memset(slot[i], (int)(i & 0xff), n);
			len[i] = n;
		}
		ops++;
	}
	for (int i = 0; i < SLOTS; i++)
		free(slot[i]);
	/* A few big blocks, as a program loading data would. */
	for (int r = 0; r < 4; r++) {
		size_t n = (size_t)64 << 20;
		unsigned char *big = malloc(n);
		if (!big)
			return 3;
		memset(big, r, n);
		sum += big[n - 1] + big[n / 2];
		free(big);
	}
	printf("operations=%ld checksum=%016llx\n", ops, (unsigned long long)sum);
	return 0;
}
