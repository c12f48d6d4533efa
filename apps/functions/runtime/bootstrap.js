// The Node.js function runtime of `shoal serve` (`shoal fn deploy NAME
// --runtime node HANDLER.js`): the gateway runs the host's /usr/bin/node
// with this file, which serves the handler beside it (handler.js, a copy of
// the file deployed) over HTTP on the instance's port.
//
// The handler exports handle(req) (module.exports = function, or
// exports.handle); req has method, path, query (without '?'), headers and
// body (a Buffer). It returns, or resolves to:
//   "text" or a Buffer                  -> 200 (text/plain or octet-stream)
//   { status, body, type, headers }     -> that answer (body may be a
//                                          readable stream: piped)
//   nothing                             -> 200 with an empty body
// A throw (or a rejected promise) answers 500 with its message; the stack
// goes to stderr, which the gateway keeps as the function's logs.
//
// Under shoal the runtime listens on $PORT (the tender attaches that listen
// to the socket the gateway handed over); natively (the process backend)
// it serves the socket inherited as descriptor $LISTEN_FD. Nothing runs
// until the first connection: the instance waits in epoll on its listening
// socket, the point an spt template is copied from.
'use strict';
const http = require('http');
const path = require('path');

const file = path.join(__dirname, 'handler.js');
let handle;
try {
  const mod = require(file);
  handle = typeof mod === 'function' ? mod : mod && mod.handle;
} catch (e) {
  console.error(`node runtime: cannot load the handler: ${e && e.stack ? e.stack : e}`);
  process.exit(2);
}
if (typeof handle !== 'function') {
  console.error('node runtime: the handler exports no function handle(req)');
  process.exit(2);
}

function send(res, out) {
  if (out && typeof out === 'object' && out.body && typeof out.body.pipe === 'function') {
    // A stream (fs.createReadStream): sent as it is read, not held whole.
    const headers = { ...(out.headers || {}), 'content-type': out.type || 'application/octet-stream' };
    out.body.on('error', (e) => {
      console.error(`node runtime: the answer's stream failed: ${e.message}`);
      res.destroy(e);
    });
    res.writeHead(out.status || 200, headers);
    out.body.pipe(res);
    return;
  }
  let status = 200;
  let body = out;
  let type;
  let headers = {};
  if (out && typeof out === 'object' && !Buffer.isBuffer(out) && !(out instanceof Uint8Array)) {
    status = out.status || 200;
    body = out.body;
    type = out.type;
    headers = out.headers || {};
  }
  if (body === undefined || body === null) body = '';
  if (typeof body !== 'string' && !Buffer.isBuffer(body) && !(body instanceof Uint8Array)) body = JSON.stringify(body);
  if (!type) type = typeof body === 'string' ? 'text/plain' : 'application/octet-stream';
  res.writeHead(status, { ...headers, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const url = req.url || '/';
    const q = url.indexOf('?');
    const r = {
      method: req.method,
      path: q < 0 ? url : url.slice(0, q),
      query: q < 0 ? '' : url.slice(q + 1),
      headers: req.headers,
      body: Buffer.concat(chunks),
    };
    let out;
    try {
      out = await handle(r);
    } catch (e) {
      console.error(`node runtime: ${req.method} ${url}: handle(req) threw: ${e && e.stack ? e.stack : e}`);
      const msg = `${e && e.message !== undefined ? e.message : e}\n`;
      res.writeHead(500, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(msg) });
      res.end(msg);
      return;
    }
    send(res, out);
  });
});
// The gateway keeps its connections to an instance open between requests.
server.keepAliveTimeout = 0;
server.on('error', (e) => {
  console.error(`node runtime: listen: ${e.message}`);
  process.exit(2);
});
if (process.env.LISTEN_FD) {
  server.listen({ fd: Number(process.env.LISTEN_FD) });
} else if (process.env.PORT) {
  server.listen(Number(process.env.PORT), '0.0.0.0');
} else {
  console.error('node runtime: neither PORT nor LISTEN_FD is set');
  process.exit(2);
}
