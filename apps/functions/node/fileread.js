// The 50 MiB /data.bin of the function's fs read into memory and summed
// (go/fileread's counterpart; the checksum is mod 2^32 here, Go's mod 2^64).
const fs = require('fs');
exports.handle = () => {
  let data;
  try {
    data = fs.readFileSync((process.env.FN_ROOT || '') + '/data.bin');
  } catch (e) {
    return { status: 404, body: 'no /data.bin\n' };
  }
  let sum = 0;
  for (let i = 0; i < data.length; i++) sum = (Math.imul(sum, 31) + data[i]) >>> 0;
  return `read ${data.length} bytes, checksum ${sum}\n`;
};
