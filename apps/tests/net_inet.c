/* net_inet: until the host-socket backend exists, Internet sockets are
 * refused honestly (EAFNOSUPPORT), never faked. Not compared with Linux. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int main(void)
{
	int r = socket(AF_INET, SOCK_STREAM, 0);
	printf("AF_INET stream: %d %s\n", r, r < 0 && errno == EAFNOSUPPORT ? "EAFNOSUPPORT" : "?");
	r = socket(AF_INET6, SOCK_DGRAM, 0);
	printf("AF_INET6 dgram: %d %s\n", r, r < 0 && errno == EAFNOSUPPORT ? "EAFNOSUPPORT" : "?");
	int sv[2];
	r = socketpair(AF_INET, SOCK_STREAM, 0, sv);
	printf("AF_INET socketpair: %d %s\n", r, r < 0 && errno == EOPNOTSUPP ? "EOPNOTSUPP" : "?");
	r = socket(12345, SOCK_STREAM, 0);
	printf("unknown family: %d %s\n", r, r < 0 && errno == EAFNOSUPPORT ? "EAFNOSUPPORT" : "?");
	return 0;
}
