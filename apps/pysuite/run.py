"""Runs modules of CPython's own test suite (Debian's libpython3.11-testsuite)
and prints every test's outcome, so that a run under shoal can be compared
with a native one test by test (crates/shoal-cli/tests/pysuite.rs).

usage: python3.11 run.py MODULE...   (e.g. test_json test_re)

Prints, for each module, one line per test that did not pass
(`skip|fail|error|xfail|xpass MODULE TEST_ID`) and a summary line
(`MODULE ran=N ok=N skip=N fail=N error=N`), with no timings, so two runs
of the same suite print the same text. As regrtest does without `-u`,
tests that need a resource (network, cpu, largefile...) are skipped; each
module runs in a fresh temporary working directory (tests write TESTFN
there).
"""
import os
import sys
import tempfile
import unittest

from test import support
from test.support import os_helper

# What `python3.11 -m test` does without -u: no optional resources
# (network, subprocess-heavy cpu tests, large files).
support.use_resources = []
support.verbose = 0


class Outcomes(unittest.TestResult):
    """Records each test's outcome by its id."""

    def __init__(self):
        super().__init__()
        self.rows = []
        self.ok = 0

    def addSuccess(self, test):
        self.ok += 1

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.rows.append(("skip", test.id()))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.rows.append(("fail", test.id()))
        self.detail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        # setUpClass / module fixtures fail as a _ErrorHolder.
        self.rows.append(("error", getattr(test, "id", lambda: str(test))()))
        self.detail(test, err)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.rows.append(("xfail", test.id()))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.rows.append(("xpass", test.id()))

    def addSubTest(self, test, subtest, err):
        # A failing subtest fails its test (counted once per subtest, as
        # unittest does).
        super().addSubTest(test, subtest, err)
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self.rows.append((kind, subtest.id()))
            self.detail(subtest, err)

    def detail(self, test, err):
        # Why, on stderr: the comparison reads stdout only.
        import traceback

        text = "".join(traceback.format_exception(*err)).rstrip().splitlines()
        print(f"--- {test}", *text[-6:], sep="\n  ", file=sys.stderr)


def run(name):
    top = os.getcwd()
    work = tempfile.mkdtemp(prefix="pysuite-")
    os.chdir(work)
    try:
        try:
            module = __import__(f"test.{name}", fromlist=["*"])
            suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        except unittest.SkipTest as e:
            print(f"{name} skipped-module {e}")
            return
        result = Outcomes()
        suite.run(result)
    finally:
        os.chdir(top)
        os_helper.rmtree(work)
    for kind, tid in sorted(result.rows):
        print(kind, name, tid)
    count = lambda k: sum(1 for r in result.rows if r[0] == k)
    print(f"{name} ran={result.testsRun} ok={result.ok} skip={count('skip')} fail={count('fail')} error={count('error')}")
    sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: run.py MODULE...")
    for m in sys.argv[1:]:
        run(m)
