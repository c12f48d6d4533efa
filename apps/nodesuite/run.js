// Runs npm packages' own test suites (tape) in this one node process and
// prints every test's outcome, so that a run under shoal can be compared
// with a native one test by test (crates/shoal-cli/tests/nodesuite.rs).
//
// usage: node run.js ROOT PACKAGE...
//   ROOT: the directory scripts/setup installed apps/nodesuite/package.json
//   into (it holds node_modules/PACKAGE with the package's tests and
//   node_modules/tape, the runner).
//
// Prints one line per test (subtests too), `ok|fail|skip|todo PACKAGE NAME`
// (NAME: the test's name after its parents' ones, joined by " > "; a name
// seen before in the package gets " [N]"), and per package a summary line
// `PACKAGE tests=N ok=N fail=N skip=N todo=N asserts=N`, with no timings,
// so that two runs of the same suite print the same text. A package that
// does not finish prints `unfinished PACKAGE ...` and the run stops
// (exit status 3); an exception no test caught prints `crash PACKAGE ...`
// (exit status 2). Why a test failed goes to stderr.
//
// Each package runs in a harness of its own: `require('tape')` in its
// test files is answered with that harness, as `tape FILES` would make
// one, and the next package starts when every test of the previous one
// has ended. The working directory is the package's own, as under
// `npm test`.
'use strict';

const fs = require('fs');
const path = require('path');
const Module = require('module');

// Each package's test files, as its package.json's test script names them
// (helper files that hold no test are harmless: they register nothing),
// less the files left out for the reasons given.
const SUITES = {
  qs: ['test/*.js'],
  // test/test.js hashes megabytes against node's crypto (18 s of CPU).
  'sha.js': ['test/hash.js', 'test/vectors.js'],
  // test/dh.js and test/node/dh.js generate Diffie-Hellman primes (12 and
  // 2.4 s of CPU), index.js loads every file again, create-hash.js repeats
  // sha.js's vectors.
  'crypto-browserify': [
    'test/aes.js', 'test/create-hmac.js', 'test/ecdh.js', 'test/pbkdf2.js', 'test/public-encrypt.js',
    'test/random-bytes.js', 'test/random-fill.js', 'test/sign.js',
  ],
  'object-inspect': ['test/*.js'],
  // Left out: node_path, pathfilter, resolver, resolver_sync, subdirs and
  // symlinks need fixtures under test/**/node_modules, which the published
  // package lacks (npm leaves node_modules out of a package); natively
  // they fail or throw outside any test, which ends the run.
  resolve: [
    'test/core.js', 'test/dotdot.js', 'test/faulty_basedir.js', 'test/filter.js', 'test/filter_sync.js',
    'test/home_paths.js', 'test/home_paths_sync.js', 'test/mock.js', 'test/mock_sync.js', 'test/module_dir.js',
    'test/node-modules-paths.js', 'test/nonstring.js', 'test/precedence.js', 'test/shadowed_core.js',
  ],
  bl: ['test/test.js'],
  duplexify: ['test.js'],
  split2: ['test.js'],
  'gunzip-maybe': ['test.js'],
  fastq: ['test/test.js', 'test/promise.js'],
  events: ['tests/index.js'],
};

// How long one package may take before the run gives up on it.
const PACKAGE_DEADLINE_MS = 120000;

/** The files `pattern` (a directory and `*.js`, or one file) names, sorted. */
function expand(dir, pattern) {
  const base = path.basename(pattern);
  const sub = path.join(dir, path.dirname(pattern));
  if (!base.includes('*')) {
    return [path.join(dir, pattern)];
  }
  const ext = base.slice(base.indexOf('*') + 1);
  return fs.readdirSync(sub).filter((f) => f.endsWith(ext)).sort().map((f) => path.join(sub, f));
}

const [root, ...packages] = process.argv.slice(2);
if (!root || packages.length === 0) {
  console.error('usage: node run.js ROOT PACKAGE...');
  process.exit(1);
}
for (const p of packages) {
  if (!SUITES[p]) {
    console.error(`run.js: unknown package ${p} (known: ${Object.keys(SUITES).join(', ')})`);
    process.exit(1);
  }
}
const tape = require(path.join(root, 'node_modules', 'tape'));
const tapeFile = require.resolve(path.join(root, 'node_modules', 'tape'));

// The harness the package being loaded gets for `require('tape')`.
let harness = null;
const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (harness && (request === 'tape' || request === tapeFile)) {
    return harness;
  }
  return load.apply(this, arguments);
};

let current = null;

/** Runs one package's tests; resolves when they have all ended. */
function runPackage(name) {
  return new Promise((resolve) => {
    const dir = path.join(root, 'node_modules', name);
    const h = tape.createHarness({ autoclose: true });
    // What test files use of the module beside calling it.
    h.test = h;
    h.skip = tape.skip;
    h.Test = tape.Test;
    h.createHarness = tape.createHarness;
    h.getHarness = () => h;
    h.wait = () => {};
    h.run = () => {};
    const state = { name, tests: new Map(), names: new Map(), counts: { tests: 0, ok: 0, fail: 0, skip: 0, todo: 0, asserts: 0 } };
    current = state;
    const stream = h.createStream({ objectMode: true });
    stream.on('data', (row) => {
      if (row.type === 'test') {
        const parent = row.parent === undefined ? null : state.tests.get(row.parent);
        let full = (parent ? `${parent.name} > ` : '') + String(row.name).replace(/\s+/g, ' ').trim();
        const seen = (state.names.get(full) || 0) + 1;
        state.names.set(full, seen);
        if (seen > 1) full += ` [${seen}]`;
        state.tests.set(row.id, { name: full, skip: !!row.skip, todo: !!row.todo, failed: false, ended: false });
      } else if (row.type === 'assert') {
        const t = state.tests.get(row.test);
        state.counts.asserts++;
        if (t && !row.ok && !row.todo && !row.skip) {
          t.failed = true;
          const why = [row.name, row.operator, row.error && row.error.message].filter(Boolean).join(': ');
          console.error(`--- ${name} ${t.name}: ${why}`);
        }
      } else if (row.type === 'end') {
        const t = state.tests.get(row.test);
        if (!t) return;
        t.ended = true;
        const kind = t.skip ? 'skip' : t.todo ? 'todo' : t.failed ? 'fail' : 'ok';
        state.counts.tests++;
        state.counts[kind]++;
        console.log(`${kind} ${name} ${t.name}`);
      }
    });
    stream.on('end', () => {
      const c = state.counts;
      console.log(`${name} tests=${c.tests} ok=${c.ok} fail=${c.fail} skip=${c.skip} todo=${c.todo} asserts=${c.asserts}`);
      harness = null;
      resolve();
    });
    process.chdir(dir);
    harness = h;
    for (const pattern of SUITES[name]) {
      for (const file of expand(dir, pattern)) {
        require(file);
      }
    }
  });
}

/** The tests of the current package that started and did not end. */
function pending() {
  if (!current) return [];
  return [...current.tests.values()].filter((t) => !t.ended).map((t) => t.name);
}

process.on('uncaughtException', (err) => {
  const where = current ? `${current.name} (${pending().join(', ') || 'no test running'})` : '-';
  console.log(`crash ${where}`);
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(2);
});
process.on('exit', (code) => {
  if (current && code === 0) {
    console.log(`unfinished ${current.name} (${pending().join(', ')})`);
    process.exitCode = 3;
  }
});

(async () => {
  for (const name of packages) {
    const deadline = setTimeout(() => {
      console.log(`unfinished ${name} after ${PACKAGE_DEADLINE_MS} ms (${pending().join(', ')})`);
      process.exit(3);
    }, PACKAGE_DEADLINE_MS);
    deadline.unref();
    await runPackage(name);
    clearTimeout(deadline);
    current = null;
  }
})();
