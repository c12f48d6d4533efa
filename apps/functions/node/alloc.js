// alloc?mb=M (default 50, at most 1024): M MiB allocated and one byte of
// every 4 KiB page written (go/alloc's counterpart).
exports.handle = (req) => {
  const m = /(?:^|&)mb=(\d+)/.exec(req.query);
  const mb = m ? Number(m[1]) : 50;
  if (mb < 1 || mb > 1024) return { status: 400, body: 'mb must be between 1 and 1024\n' };
  const n = mb * 1048576;
  const p = Buffer.allocUnsafeSlow(n);
  for (let i = 0; i < n; i += 4096) p[i] = (i / 4096) & 0xff;
  let sum = 0;
  for (let i = 0; i < n; i += 4096) sum += p[i];
  return `allocated ${n} bytes, touched ${n / 4096} pages, sum ${sum}\n`;
};
