// Package fnhttp is the HTTP part shared by the Go example functions of
// `shoal serve` (apps/functions/go/), as fn_http.c is for the C ones: a
// function is one main package that calls Serve with its handler.
//
// The server listens on the socket inherited as descriptor $LISTEN_FD if
// that is set (the gateway's process backend hands one over), otherwise on
// every address, port $PORT (under shoal, the tender attaches that listen
// to the socket the gateway handed over). Files are under Root(): "" under
// shoal (the instance's root file system is the function's fs) and $FN_ROOT
// natively.
package fnhttp

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
)

// Root is the directory the function's files are under.
func Root() string {
	return os.Getenv("FN_ROOT")
}

// QueryInt is the value of key in the request's query as a number, or dflt.
func QueryInt(r *http.Request, key string, dflt int64) int64 {
	v := r.URL.Query().Get(key)
	if v == "" {
		return dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return dflt
	}
	return n
}

// QueryBounded is QueryInt kept within [lo, hi]: a value outside it is
// answered with 400 naming the bounds, and ok is false (the handler then
// returns), as the C functions answer an out-of-range parameter.
func QueryBounded(w http.ResponseWriter, r *http.Request, key string, dflt, lo, hi int64) (n int64, ok bool) {
	n = QueryInt(r, key, dflt)
	if n < lo || n > hi {
		http.Error(w, fmt.Sprintf("%s must be between %d and %d", key, lo, hi), http.StatusBadRequest)
		return n, false
	}
	return n, true
}

// Serve serves h until the listener fails; it ends the program with status
// 2 when it cannot listen, as fn_http.c does.
func Serve(h http.HandlerFunc) {
	var l net.Listener
	var err error
	if fd := os.Getenv("LISTEN_FD"); fd != "" {
		n, perr := strconv.Atoi(fd)
		if perr != nil {
			fmt.Fprintf(os.Stderr, "fnhttp: LISTEN_FD %q is not a number\n", fd)
			os.Exit(2)
		}
		l, err = net.FileListener(os.NewFile(uintptr(n), "listener"))
	} else if port := os.Getenv("PORT"); port != "" {
		l, err = net.Listen("tcp", ":"+port)
	} else {
		fmt.Fprintln(os.Stderr, "fnhttp: neither PORT nor LISTEN_FD is set")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fnhttp: listen: %v\n", err)
		os.Exit(2)
	}
	err = http.Serve(l, h)
	fmt.Fprintf(os.Stderr, "fnhttp: serve: %v\n", err)
	os.Exit(1)
}
