/* The identity-changing calls in an instance whose identity is fixed
 * (uid/gid 0, or --user): to one's own ids or -1 they succeed, to others
 * EPERM; setfsuid/setfsgid return the ids; setgroups as Linux checks it
 * (EPERM for a user that is not root, EINVAL, EFAULT), root keeping the
 * empty list. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <unistd.h>

#define show(what, call)                                                  \
    do {                                                                  \
        errno = 0;                                                        \
        long r_ = (call);                                                 \
        printf("%s: %ld %s\n", what, r_, errno ? strerror(errno) : "-"); \
    } while (0)

int main(void) {
    uid_t u = getuid();
    gid_t g = getgid();
    gid_t one = 4242;
    printf("ids %u %u\n", u, g);
    show("setresuid own", setresuid(u, u, u));
    show("setresuid -1", setresuid(-1, -1, -1));
    show("setresuid other", setresuid(-1, 4242, -1));
    show("setresgid own", setresgid(g, -1, g));
    show("setresgid other", setresgid(4242, -1, -1));
    show("setreuid own", setreuid(-1, u));
    show("setreuid other", setreuid(4242, -1));
    show("setregid own", setregid(g, g));
    show("setregid other", setregid(-1, 4242));
    show("setfsuid", setfsuid(u));
    show("setfsgid", setfsgid(g));
    show("setgroups empty", setgroups(0, NULL));
    show("setgroups one", setgroups(1, &one));
    show("setgroups too many", setgroups(65537, &one));
    show("setgroups bad list", setgroups(2, (gid_t *)8));
    return 0;
}
