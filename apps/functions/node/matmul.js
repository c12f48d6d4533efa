// matmul?n=N (default 1024, at most 2048): two N×N matrices of doubles
// multiplied (go/matmul's counterpart, the same values and loop order).
exports.handle = (req) => {
  const m = /(?:^|&)n=(\d+)/.exec(req.query);
  const n = m ? Number(m[1]) : 1024;
  if (n < 1 || n > 2048) return { status: 400, body: 'n must be between 1 and 2048\n' };
  const nn = n * n;
  const a = new Float64Array(nn), b = new Float64Array(nn), c = new Float64Array(nn);
  for (let i = 0; i < nn; i++) {
    a[i] = (i % 7) + 1.0;
    b[i] = (i % 5) - 1.0;
  }
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < n; k++) {
      const x = a[i * n + k];
      const row = k * n, out = i * n;
      for (let j = 0; j < n; j++) c[out + j] += x * b[row + j];
    }
  }
  let sum = 0;
  for (let i = 0; i < nn; i++) sum += c[i];
  return `matmul ${n} sum ${sum.toFixed(1)}\n`;
};
