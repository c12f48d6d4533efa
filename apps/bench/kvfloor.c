/* The floor of a Redis request on a platform: the smallest Redis-like
 * server, one epoll loop that reads a request and writes a fixed RESP reply
 * (nil for GET, +OK otherwise; one per command in the read), with no
 * application work. Run natively and on spt and measured like Redis
 * (docs/results/http-kv.md, "the floor"), the difference is the
 * platform's own per-request path. Usage: kvfloor [PORT] (default 6379).
 *   shoal cc -O2 apps/bench/kvfloor.c -o kvfloor.img
 *   musl-gcc -static -O2 apps/bench/kvfloor.c -o kvfloor
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 6379;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 128)) { perror("bind/listen"); return 1; }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  static char buf[65536];
  struct epoll_event out[64];
  for (;;) {
    int n = epoll_wait(ep, out, 64, 100);
    for (int i = 0; i < n; i++) {
      int fd = out[i].data.fd;
      if (fd == ls) {
        int c;
        while ((c = accept4(ls, 0, 0, SOCK_NONBLOCK)) >= 0) {
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
        continue;
      }
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, fd, 0); close(fd); continue; }
      /* one reply per command: count the array headers at line starts */
      int cmds = 0;
      for (ssize_t k = 0; k < r; k++) if (buf[k] == '*' && (k == 0 || buf[k - 1] == '\n')) cmds++;
      if (!cmds) cmds = 1;
      const char *rep = (r > 10 && memmem(buf, r, "GET", 3)) ? "$-1\r\n" : "+OK\r\n";
      static char o[65536]; int len = 0;
      for (int k = 0; k < cmds && len + 5 < (int)sizeof o; k++) { memcpy(o + len, rep, 5); len += 5; }
      write(fd, o, len);
    }
  }
}
