"""--select / --ignore (code, code prefix, slug) drop rules; --ignore-ops marks intended cuts suppressed."""

from __future__ import annotations

import pytest

from .cli_helpers import findings, run, run_json


@pytest.mark.parametrize("options, expected_code, expected", [
    ([], 1, [("GA103", None)]),
    (["--select", "GA1"], 1, [("GA103", None)]),
    (["--select", "GA10"], 1, [("GA103", None)]),
    (["--select", "zero-gradient"], 1, [("GA103", None)]),
    (["--select", "GA106"], 0, []),
    (["--select", "GA106,GA101"], 0, []),
    (["--ignore", "zero-gradient"], 0, []),
    (["--ignore", "GA1"], 0, []),
    (["--select", "GA1", "--ignore", "GA103"], 0, []),
    (["--select", "GA1", "--ignore", "GA106"], 1, [("GA103", None)]),
])
def test_select_and_ignore(argmax, options, expected_code, expected):
    code, doc = run_json(argmax, *options)
    assert (code, findings(doc)) == (expected_code, expected)
    assert doc["summary"]["error"] == len(expected)


@pytest.mark.parametrize("pattern, known", [
    ("ArgMax", True),
    ("Arg*", True),
    ("GA103:Arg*", True),
    ("zero-gradient:ArgMax", True),
    ("GA1:*", True),
    ("stop-gradient:ArgMax", False),  # another rule's ignore
    ("argmax", False),                # globs are case-sensitive
    ("*/ArgMax", False),              # matched against the op name, which has no scope here
    ("ArgMin", False),
])
def test_ignore_ops_marks_the_finding_suppressed(argmax, pattern, known):
    code, doc = run_json(argmax, "--ignore-ops", pattern)
    assert findings(doc) == [("GA103", f"ignore-ops {pattern}" if known else None)]
    assert code == (0 if known else 1) and doc["summary"]["error"] == (0 if known else 1)


def test_ignore_ops_never_matches_a_finding_without_an_op(disconnected):
    code, doc = run_json(disconnected, "--ignore-ops", "*", "--fail-on", "warning")
    assert code == 1 and findings(doc) == [("GA108", None)]


def test_text_report_counts_what_was_suppressed(argmax):
    result = run(argmax, "--static-only", "--ignore-ops", "ArgMax")
    assert result.exit_code == 0
    assert "1 finding(s) suppressed or in the baseline" in result.stdout
    assert "ERRORS" not in result.stdout and "PASS: 0 error(s)" in result.stdout


def test_bad_ignore_ops_syntax(argmax):
    for bad in (":ArgMax", "GA103:"):
        result = run(argmax, "--static-only", "--ignore-ops", bad)
        assert result.exit_code == 2 and "expected GLOB or RULE:GLOB" in result.stderr
