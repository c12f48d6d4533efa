/* dynsites: a dynamically linked program calling into libsites.so (see
 * there). Prints the first byte of the library's `mov eax, 39; syscall`
 * pair before and after calling it (0xb8, the `mov`, natively; on shoal
 * 0xe9 after the first call: a `jmp` to the kernel's trampoline), then
 * checks that 100000 calls through the pair and through a jump to the
 * middle of a pair all give getpid(). Then the forward rewrite of
 * lib_read's `syscall; cmp rax, -4096` (first byte 0x0f, the `syscall`,
 * natively; 0xe9 on shoal once used): three threads wait in it, each on
 * its own empty pipe, while the main thread calls it on a pipe with data;
 * whichever call traps first rewrites the site, the others come through
 * it or trapped before the rewrite. Every call must come back into the
 * moved check (not the middle of the `jmp`) with its bytes, and 1000
 * calls each afterwards too. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

long lib_pair(void);
long lib_middle(void);
long lib_read(int fd, void *buf, unsigned long n);
const unsigned char *lib_site(int which);

#define WAITERS 3
#define READS 1000

static int pipes[WAITERS][2];

/* Reads one byte (its number), then READS more; returns how many bytes
 * were not what the main thread wrote. */
static void *waiter(void *arg)
{
	long i = (long)arg, wrong = 0;
	unsigned char c = 0xff;
	if (lib_read(pipes[i][0], &c, 1) != 1 || c != i)
		wrong++;
	for (int k = 0; k < READS; k++)
		if (lib_read(pipes[i][0], &c, 1) != 1 || c != (unsigned char)k)
			wrong++;
	return (void *)wrong;
}

int main(void)
{
	long pid = getpid();
	printf("pair before: %02x\n", lib_site(0)[0]);
	long a = lib_pair();
	printf("pair after: %02x\n", lib_site(0)[0]);
	long b = lib_middle();
	printf("middle after: %02x\n", lib_site(1)[0]);
	long bad = 0;
	for (int i = 0; i < 100000; i++)
		bad += lib_pair() != pid;
	for (int i = 0; i < 1000; i++)
		bad += lib_middle() != pid;
	printf("agree: %d %d, %ld wrong\n", a == pid, b == pid, bad);

	int mine[2];
	pthread_t t[WAITERS];
	if (pipe(mine))
		return 1;
	printf("forward before: %02x\n", lib_site(2)[0]);
	fflush(stdout);
	for (long i = 0; i < WAITERS; i++)
		if (pipe(pipes[i]) || pthread_create(&t[i], NULL, waiter, (void *)i))
			return 1;
	usleep(200000); /* the waiters are inside lib_read */
	char x = 'x', y = 0;
	if (write(mine[1], &x, 1) != 1)
		return 1;
	long got = lib_read(mine[0], &y, 1);
	printf("forward after: %02x, read %ld %c\n", lib_site(2)[0], got, y);
	unsigned char seq[READS];
	for (int k = 0; k < READS; k++)
		seq[k] = (unsigned char)k;
	long woke = 0, wrong = 0;
	for (long i = 0; i < WAITERS; i++) {
		unsigned char c = (unsigned char)i;
		if (write(pipes[i][1], &c, 1) != 1 || write(pipes[i][1], seq, READS) != READS)
			return 1;
	}
	for (long i = 0; i < WAITERS; i++) {
		void *w;
		if (pthread_join(t[i], &w) == 0) {
			woke++;
			wrong += (long)w;
		}
	}
	printf("waiters: %ld of %d back, %ld wrong\n", woke, WAITERS, wrong);
	return 0;
}
