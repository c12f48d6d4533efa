/* pause: the pod sandbox's program under a CRI runtime handler `shoal`
 * (docs/kubernetes.md). containerd starts the sandbox ("pause") container
 * of every pod through the pod's handler before its containers; this one
 * waits until it is killed, as Kubernetes' pause does, so that the pod's
 * sandbox costs one idle shoal instance and needs no Linux binary.
 * SIGTERM and SIGINT end it with status 0 (Kubernetes' pause does the
 * same); containerd stops a sandbox with SIGKILL anyway. */
#include <signal.h>
#include <unistd.h>

static void done(int sig)
{
	(void)sig;
	_exit(0);
}

int main(void)
{
	signal(SIGTERM, done);
	signal(SIGINT, done);
	for (;;)
		pause();
}
