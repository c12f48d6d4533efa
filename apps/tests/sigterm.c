/* A SIGTERM sent to `shoal run` reaches the program (issue "Nginx and
 * Redis on shoal", clean stop). With no argument: a handler counts the
 * signal, the program says "ready", sleeps in short naps until the
 * signal came, then says so and exits 3. With "long": the same, but in
 * one nap of 120 s (the signal must cut the sleep short, as on Linux).
 * With "pause": the same, waiting in pause(); with "suspend": in
 * sigsuspend() with SIGTERM blocked outside it (the classic daemon loop).
 * With "default": no handler, so SIGTERM ends it as on Linux (status 143).
 * With "spin" and "spin-default": the same two, but the program computes
 * in a loop without a system call (the signal must stop it where it is).
 * With "slow": as with no argument, but once the signal came the program
 * takes 3 s more to stop (a handler's work, like Redis saving its
 * snapshot: `shoal run --stop-timeout 1` must not cut it short). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t got;

static void on_term(int sig)
{
	got = sig;
}

int main(int argc, char **argv)
{
	int dfl = argc > 1 && (strcmp(argv[1], "default") == 0 || strcmp(argv[1], "spin-default") == 0);
	int spin = argc > 1 && strncmp(argv[1], "spin", 4) == 0;
	if (!dfl) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_term;
		sigaction(SIGTERM, &sa, 0);
	}
	int mode_pause = argc > 1 && strcmp(argv[1], "pause") == 0;
	int mode_suspend = argc > 1 && strcmp(argv[1], "suspend") == 0;
	sigset_t term, old;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	if (mode_suspend)
		sigprocmask(SIG_BLOCK, &term, &old);
	printf("ready\n");
	fflush(stdout);
	if (mode_pause || mode_suspend) {
		while (!got) {
			if (mode_pause)
				pause();
			else
				sigsuspend(&old);
		}
		printf("got signal %d\n", (int)got);
		return 3;
	}
	if (spin) {
		while (!got)
			;
		printf("got signal %d\n", (int)got);
		return 3;
	}
	struct timespec nap = {0, 20 * 1000 * 1000};
	if (argc > 1 && strcmp(argv[1], "long") == 0)
		nap = (struct timespec){120, 0};
	while (!got)
		nanosleep(&nap, 0);
	if (argc > 1 && strcmp(argv[1], "slow") == 0) {
		struct timespec work = {3, 0};
		nanosleep(&work, 0);
	}
	printf("got signal %d\n", (int)got);
	return 3;
}
