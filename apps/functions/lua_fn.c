/* lua_fn: the Lua function runtime of `shoal serve` — the counterpart of
 * the Node.js functions of the serverless-on-the-edge paper. One image (built by the `lua-fn` recipe from
 * Debian's Lua 5.4 source plus fn_http.c) serves any handler script found in
 * the function's root file system, so deploying a Lua function is deploying
 * this image with an `fs` directory that holds `handler.lua`.
 *
 * The script ($HANDLER, default /handler.lua under the function's root)
 * defines a global function handle(req); req has the fields method, path,
 * query (without '?') and body. It returns
 *   "text"                         -> 200, text/plain
 *   status, "text" [, "type"]      -> that status (and Content-Type)
 *   { status = …, body = …, type = … }
 *   nothing                        -> 200 with an empty body
 * A Lua error answers 500 with the message (also written to stderr, so it
 * shows in the gateway's logs).
 *
 * fn_http serves each connection on its own thread and a lua_State is not
 * thread-safe, so every thread gets its own state, made on its first request
 * and closed when the thread ends. The script is loaded once at start-up as
 * well, so a missing script or a syntax error stops the instance at once
 * with a one-line message instead of failing every request. */
#include "fn_http.h"
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char script[4096];
static pthread_key_t state_key;

static void close_state(void *L)
{
	lua_close(L);
}

/* A new state with the standard libraries and the script loaded, or NULL
 * with the reason in err. */
static lua_State *new_state(char *err, size_t errlen)
{
	lua_State *L = luaL_newstate();
	if (!L) {
		snprintf(err, errlen, "cannot create a Lua state: out of memory");
		return NULL;
	}
	luaL_openlibs(L);
	if (luaL_dofile(L, script) != LUA_OK) {
		snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "cannot load the handler script");
		lua_close(L);
		return NULL;
	}
	if (lua_getglobal(L, "handle") != LUA_TFUNCTION) {
		snprintf(err, errlen, "%s: the script defines no global function handle(req)", script);
		lua_close(L);
		return NULL;
	}
	lua_settop(L, 0);
	return L;
}

int fn_init(void)
{
	const char *h = getenv("HANDLER");
	if (h && *h)
		snprintf(script, sizeof script, "%s%s", h[0] == '/' ? fn_root() : "", h);
	else
		snprintf(script, sizeof script, "%s/handler.lua", fn_root());
	if (pthread_key_create(&state_key, close_state)) {
		fprintf(stderr, "lua_fn: cannot create the per-thread state key\n");
		return -1;
	}
	char err[512];
	lua_State *L = new_state(err, sizeof err);
	if (!L) {
		fprintf(stderr, "lua_fn: %s\n", err);
		return -1;
	}
	lua_close(L);
	return 0;
}

static void fail(struct reply *r, const char *what, const char *msg)
{
	fprintf(stderr, "lua_fn: %s: %s\n", what, msg);
	r->status = 500;
	fn_printf(r, "%s: %s\n", what, msg);
}

/* Adds the traceback to an error raised in the handler. */
static int traceback(lua_State *L)
{
	luaL_traceback(L, L, lua_tostring(L, 1), 1);
	return 1;
}

static void set_body(struct reply *r, lua_State *L, int idx)
{
	size_t n = 0;
	const char *s = luaL_tolstring(L, idx, &n);
	/* The Lua string may be collected once the stack is cleared. */
	char *copy = malloc(n ? n : 1);
	if (!copy) {
		r->status = 500;
		r->body = "out of memory\n";
		r->len = strlen(r->body);
		return;
	}
	memcpy(copy, s, n);
	r->body = copy;
	r->len = n;
	r->body_free = 1;
	lua_pop(L, 1);
}

static const char *keep_type(lua_State *L, int idx)
{
	/* Content-Type must outlive the state's stack: one per thread is enough,
	 * since the reply is sent before the thread's next request. */
	static __thread char type[128];
	const char *t = lua_tostring(L, idx);
	if (!t || strpbrk(t, "\r\n"))
		return NULL;
	snprintf(type, sizeof type, "%s", t);
	return type;
}

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	lua_State *L = pthread_getspecific(state_key);
	if (!L) {
		char err[512];
		L = new_state(err, sizeof err);
		if (!L) {
			fail(r, "cannot load the handler", err);
			return 0;
		}
		pthread_setspecific(state_key, L);
	}
	lua_settop(L, 0);
	lua_pushcfunction(L, traceback);
	lua_getglobal(L, "handle");
	lua_createtable(L, 0, 4);
	lua_pushstring(L, method);
	lua_setfield(L, -2, "method");
	lua_pushstring(L, path);
	lua_setfield(L, -2, "path");
	lua_pushstring(L, query);
	lua_setfield(L, -2, "query");
	lua_pushlstring(L, body, len);
	lua_setfield(L, -2, "body");
	if (lua_pcall(L, 1, 3, 1) != LUA_OK) {
		fail(r, "the handler failed", lua_tostring(L, -1) ? lua_tostring(L, -1) : "(no message)");
		lua_settop(L, 0);
		return 0;
	}
	/* Results at 2, 3, 4 (1 is the traceback function). */
	if (lua_type(L, 2) == LUA_TTABLE) {
		lua_getfield(L, 2, "status");
		lua_getfield(L, 2, "body");
		lua_getfield(L, 2, "type");
		lua_replace(L, 4);
		lua_replace(L, 3);
		lua_replace(L, 2);
	}
	if (lua_isinteger(L, 2)) {
		lua_Integer st = lua_tointeger(L, 2);
		if (st < 100 || st > 999) {
			fail(r, "the handler failed", "it returned a status outside 100-999");
			lua_settop(L, 0);
			return 0;
		}
		r->status = (int)st;
		r->type = keep_type(L, 4);
		if (!lua_isnoneornil(L, 3))
			set_body(r, L, 3);
	} else if (lua_isnil(L, 2)) {
		/* Nothing returned: 200 with an empty body. */
	} else {
		r->type = keep_type(L, 3);
		set_body(r, L, 2);
	}
	lua_settop(L, 0);
	return 0;
}
