# The Python function runtime of `shoal serve` (`shoal fn deploy NAME
# --runtime python HANDLER.py`): the gateway runs the host's
# /usr/bin/python3.11 with this file, which serves the handler beside it
# (handler.py, a copy of the file deployed) over HTTP on the instance's port.
#
# The handler defines handle(req); req has method, path, query (without
# '?'), headers (a dict, names lower-case) and body (bytes). It returns
#   "text" or bytes                      -> 200 (text/plain or octet-stream)
#   (status, body) or (status, body, type)
#   {"status": …, "body": …, "type": …, "headers": {…}}
#   None                                 -> 200 with an empty body
# An exception answers 500 with its message; the traceback goes to stderr,
# which the gateway keeps as the function's logs.
#
# Under shoal the runtime listens on $PORT (the tender attaches that listen
# to the socket the gateway handed over); natively (the process backend) it
# serves the socket inherited as descriptor $LISTEN_FD. The main thread
# waits in accept() and each connection gets a thread: until the first
# connection nothing runs, the point an spt template is copied from.
import http.server
import importlib.util
import json
import os
import socket
import sys
import threading
import traceback

# The runtime directory is the deployed handler's, shared by instances and
# read-only in a sandbox: no __pycache__ is written into it.
sys.dont_write_bytecode = True

HERE = os.path.dirname(os.path.abspath(__file__))


def load():
    path = os.path.join(HERE, "handler.py")
    spec = importlib.util.spec_from_file_location("handler", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.stderr.write("python runtime: cannot load the handler:\n" + traceback.format_exc())
        sys.exit(2)
    h = getattr(mod, "handle", None)
    if not callable(h):
        sys.stderr.write("python runtime: the handler defines no function handle(req)\n")
        sys.exit(2)
    return h


handle = load()


def answer(out):
    status, body, ctype, headers = 200, out, None, {}
    if isinstance(out, tuple):
        status, body = out[0], out[1]
        ctype = out[2] if len(out) > 2 else None
    elif isinstance(out, dict):
        status, body = out.get("status", 200), out.get("body")
        ctype, headers = out.get("type"), out.get("headers") or {}
    if body is None:
        body = b""
    if isinstance(body, str):
        body, ctype = body.encode(), ctype or "text/plain"
    elif not isinstance(body, (bytes, bytearray, memoryview)):
        body, ctype = json.dumps(body).encode(), ctype or "application/json"
    return int(status), bytes(body), ctype or "application/octet-stream", headers


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def serve(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        path, _, query = self.path.partition("?")
        req = {"method": self.command, "path": path, "query": query, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        try:
            status, data, ctype, headers = answer(handle(req))
        except Exception as e:
            sys.stderr.write(f"python runtime: {self.command} {self.path}: handle(req) raised:\n{traceback.format_exc()}")
            sys.stderr.flush()
            status, data, ctype, headers = 500, f"{e}\n".encode(), "text/plain", {}
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = serve

    def log_message(self, *args):
        pass


def connection(conn, addr):
    try:
        Handler(conn, addr, None)
    except Exception:
        pass
    finally:
        conn.close()


def listener():
    if os.environ.get("LISTEN_FD"):
        return socket.socket(fileno=int(os.environ["LISTEN_FD"]))
    if os.environ.get("PORT"):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", int(os.environ["PORT"])))
        s.listen(128)
        return s
    sys.stderr.write("python runtime: neither PORT nor LISTEN_FD is set\n")
    sys.exit(2)


sock = listener()
while True:
    c, a = sock.accept()
    threading.Thread(target=connection, args=(c, a), daemon=True).start()
