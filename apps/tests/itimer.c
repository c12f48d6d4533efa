/* The real-time interval timer (issue "Nginx and Redis on shoal"):
 * setitimer/getitimer(ITIMER_REAL) and alarm raise SIGALRM on time, re-arm
 * with the interval, interrupt a blocking read (EINTR without SA_RESTART),
 * and disarm. Prints the same natively and on shoal. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);

	struct itimerval it = {{0, 20000}, {0, 30000}}, cur, old;
	printf("setitimer: %d\n", setitimer(ITIMER_REAL, &it, 0));
	getitimer(ITIMER_REAL, &cur);
	printf("armed: interval %ld us, value in (0, 30000]: %d\n", (long)cur.it_interval.tv_usec,
	       cur.it_value.tv_sec == 0 && cur.it_value.tv_usec > 0 && cur.it_value.tv_usec <= 30000);
	struct timespec nap = {0, 5 * 1000 * 1000};
	while (alarms < 3)
		nanosleep(&nap, 0);
	printf("three alarms from one setitimer\n");
	memset(&it, 0, sizeof it);
	printf("disarm: %d\n", setitimer(ITIMER_REAL, &it, &old));
	printf("old interval %ld us\n", (long)old.it_interval.tv_usec);
	getitimer(ITIMER_REAL, &cur);
	printf("disarmed: %d\n", cur.it_value.tv_sec == 0 && cur.it_value.tv_usec == 0);

	int p[2];
	pipe(p);
	char c;
	alarms = 0;
	alarm(1);
	ssize_t n = read(p[0], &c, 1);
	printf("read: %zd (%s), alarms %d\n", n, n < 0 ? strerror(errno) : "data", (int)alarms);
	printf("alarm(5) then alarm(0) returns %u\n", (alarm(5), alarm(0)));
	return 0;
}
