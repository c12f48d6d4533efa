// The no-op (seed 002's Node.js no-op, the counterpart of go/noop): answers at once.
exports.handle = () => 'noop\n';
