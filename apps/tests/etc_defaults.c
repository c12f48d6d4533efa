/* The users, groups and hosts a program finds in /etc when the root file
 * system brings none of its own (shoal's defaults: root and nobody, the
 * loopback names), and that a root file system's own files win. Prints
 * what it found; the test compares with what it expects. */
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>

int main(void)
{
	const char *users[] = {"root", "nobody", "www-data"};
	for (int i = 0; i < 3; i++) {
		struct passwd *p = getpwnam(users[i]);
		if (p)
			printf("user %s: uid %u gid %u home %s\n", users[i], (unsigned)p->pw_uid, (unsigned)p->pw_gid, p->pw_dir);
		else
			printf("user %s: none\n", users[i]);
	}
	struct group *g = getgrgid(65534);
	printf("group 65534: %s\n", g ? g->gr_name : "none");
	struct hostent *h = gethostbyname("localhost");
	printf("localhost: %s\n", h ? "found" : "none");
	return 0;
}
