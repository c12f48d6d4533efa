/* fork, vfork, execve and execveat made as raw system calls (as Go's
 * os/exec and static glibc programs make them) end with ENOSYS and
 * nothing else: the caller goes on and reports the error. musl's own
 * fork(), posix_spawn() and system() go through the same calls. */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int main(void) {
    char *argv[] = {"/bin/true", 0};
    long r = syscall(SYS_fork);
    printf("fork: %ld %s\n", r, strerror(errno));
    r = syscall(SYS_vfork);
    printf("vfork: %ld %s\n", r, strerror(errno));
    r = syscall(SYS_execve, "/bin/true", argv, environ);
    printf("execve: %ld %s\n", r, strerror(errno));
    r = syscall(SYS_execveat, -100, "/bin/true", argv, environ, 0);
    printf("execveat: %ld %s\n", r, strerror(errno));
    pid_t pid = fork();
    printf("fork(): %d %s\n", (int)pid, strerror(errno));
    int e = posix_spawn(&pid, "/bin/true", 0, 0, argv, environ);
    printf("posix_spawn: %s\n", strerror(e));
    printf("still running\n");
    return 0;
}
