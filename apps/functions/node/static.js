// A static file of the function's fs (default /data.bin, 50 MiB) served as
// it is (go/static's counterpart).
const fs = require('fs');
exports.handle = (req) => {
  let p = req.path;
  if (p.includes('..')) return { status: 404, body: 'not found\n' };
  if (p === '/') p = '/data.bin';
  try {
    return { body: fs.readFileSync((process.env.FN_ROOT || '') + p), type: 'application/octet-stream' };
  } catch (e) {
    return { status: 404, body: 'not found\n' };
  }
};
