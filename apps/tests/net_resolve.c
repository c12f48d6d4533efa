/* net_resolve: getaddrinfo for numeric addresses and for "localhost"
 * (which shoal answers from the /etc/hosts it gives an empty root). Prints
 * each address found, one per line, in the order getaddrinfo returns them. */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>

static void show(const char *host)
{
	struct addrinfo hints, *res, *ai;
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, "80", &hints, &res);
	if (rc) {
		printf("%s: %s\n", host, gai_strerror(rc));
		return;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		char buf[64];
		void *a = ai->ai_family == AF_INET ? (void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr : (void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
		printf("%s: %s\n", host, inet_ntop(ai->ai_family, a, buf, sizeof buf));
	}
	freeaddrinfo(res);
}

int main(void)
{
	show("127.0.0.1");
	show("::1");
	show("10.1.2.3");
	show("localhost");
	return 0;
}
