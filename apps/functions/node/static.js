// A static file of the function's fs (default /data.bin, 50 MiB) streamed
// as it is read (go/static's counterpart, which serves it with
// http.ServeContent).
const fs = require('fs');
exports.handle = (req) => {
  let p = req.path;
  if (p.includes('..')) return { status: 404, body: 'not found\n' };
  if (p === '/') p = '/data.bin';
  const file = (process.env.FN_ROOT || '') + p;
  let st;
  try {
    st = fs.statSync(file);
  } catch (e) {
    return { status: 404, body: 'not found\n' };
  }
  if (!st.isFile()) return { status: 404, body: 'not found\n' };
  return { body: fs.createReadStream(file), type: 'application/octet-stream', headers: { 'content-length': String(st.size) } };
};
