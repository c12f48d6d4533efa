/* signals: a handler (installed by glibc with SA_RESTORER) that makes
 * system calls of its own, run for a signal the program raises; then an
 * alternate stack (SA_ONSTACK). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int got;
static volatile int on_alt;
static char *alt;

static void handler(int s)
{
	char m[] = "in handler\n";
	write(1, m, strlen(m));
	char here;
	if (alt && &here >= alt && &here < alt + SIGSTKSZ)
		on_alt = 1;
	got += s;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigaction(SIGUSR1, &sa, 0);
	for (int i = 0; i < 3; i++)
		raise(SIGUSR1);
	printf("got %d\n", got);
	alt = malloc(SIGSTKSZ);
	stack_t ss = { .ss_sp = alt, .ss_size = SIGSTKSZ, .ss_flags = 0 };
	sigaltstack(&ss, 0);
	sa.sa_flags = SA_ONSTACK;
	sigaction(SIGUSR2, &sa, 0);
	raise(SIGUSR2);
	printf("got %d, on the alternate stack: %s\n", got, on_alt ? "yes" : "no");
	return 0;
}
