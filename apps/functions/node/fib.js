// fib?n=N (default 30, at most 45): the N-th Fibonacci number, recursively
// (go/fib's counterpart: CPU only, no system calls).
function fib(n) {
  return n < 2 ? n : fib(n - 1) + fib(n - 2);
}
exports.handle = (req) => {
  const m = /(?:^|&)n=(\d+)/.exec(req.query);
  const n = m ? Number(m[1]) : 30;
  if (n > 45) return { status: 400, body: 'n must be between 0 and 45\n' };
  return `fib(${n}) = ${fib(n)}\n`;
};
