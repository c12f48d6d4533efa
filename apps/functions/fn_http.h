/* fn_http: the HTTP/1.1 server part shared by the example functions of
 * `shoal serve` (apps/functions/). A function is one C file that defines
 * handle(); fn_http.c supplies main(), which serves it.
 *
 * The server listens on the socket inherited as descriptor $LISTEN_FD if
 * that is set (the gateway's `process` backend hands one over, so that
 * connections made before the listen wait in the backlog), otherwise on
 * on every address, port $PORT (under shoal, the tender
 * attaches that bind to the socket the gateway handed over). Keep-alive,
 * one request at a time per connection, one thread per connection. */
#ifndef FN_HTTP_H
#define FN_HTTP_H
#include <stddef.h>

/* What handle() answers. body points to memory the function owns; if
 * body_free is non-zero, fn_http frees it with free() after sending.
 * If file is not NULL, the reply's body is that file (sent with sendfile)
 * and body is ignored. */
struct reply {
	int status;             /* 200 unless set */
	const char *type;       /* Content-Type, "text/plain" unless set */
	const char *body;
	size_t len;
	int body_free;
	const char *file;
	/* Milliseconds to wait between the head and the body: a function that
	 * is slow to finish its answer (sleep.c's ?stall=, for the gateway's
	 * whole-response timeout). */
	long body_delay_ms;
	/* Non-zero: the head and the body go out in two write() calls, as
	 * many hand-written servers send them (twowrite.c). */
	int two_writes;
};

/* The function: called once per request with the method, the path (after
 * the gateway's /fn/NAME prefix, starting with '/'), the query string
 * (without '?', "" if none) and the request body. Returns 0, or -1 to
 * close the connection without an answer. */
int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r);

/* Optional: a function may define fn_init(), called once before the server
 * listens; a non-zero result ends the program with status 1 (it writes its
 * own one-line reason to stderr). */
int fn_init(void) __attribute__((weak));

/* Optional: a function that defines fn_nagle as non-zero keeps Nagle's
 * algorithm on its connections (fn_http sets TCP_NODELAY otherwise), as a
 * hand-written server that never sets it does (twowrite.c). */
extern const int fn_nagle __attribute__((weak));

/* The value of KEY in a query string "a=1&b=2" as a number, or dflt. */
long fn_query_long(const char *query, const char *key, long dflt);

/* Sets r's body to a copy of the formatted text. */
void fn_printf(struct reply *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The file system root the function's files are under: "" under shoal
 * (the image's root file system is given with --fs) and for a native build
 * the directory $FN_ROOT (the gateway sets it to the function's fs dir). */
const char *fn_root(void);
#endif
