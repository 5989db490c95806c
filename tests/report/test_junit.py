"""JUnit XML: one test case per flow pair and per numeric check, failures carrying the finding."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gradaudit.batch import AuditFailure
from gradaudit.report import junit

from .report_helpers import suppressed


def _parse(text: str) -> ET.Element:
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>')
    return ET.fromstring(text.encode("utf-8"))


def _cases(root: ET.Element, kind: str) -> dict[str, ET.Element]:
    return {c.get("name"): c for c in root.iter("testcase") if c.get("classname").endswith("." + kind)}


def test_one_case_per_flow_pair_and_failures_on_the_cut_pairs(argmax_report):
    root = _parse(junit.render(argmax_report))
    flow = _cases(root, "flow")
    assert sorted(flow) == sorted(f"{e.source} -> {e.output}" for e in argmax_report.flow)
    failed = sorted(name for name, case in flow.items() if case.find("failure") is not None)
    assert failed == ["dense/bias -> cls", "dense/kernel -> cls", "x -> cls"]
    failure = flow["x -> cls"].find("failure")
    assert failure.get("type") == "GA103" and "ArgMax" in failure.get("message")
    assert "fix:" in failure.text and "softmax" in failure.text
    (suite,) = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("6", "3", "0")
    assert (root.get("tests"), root.get("failures")) == ("6", "3")


def test_below_the_threshold_or_suppressed_nothing_fails(argmax_report, stop_report):
    for text in (junit.render(argmax_report, "never"), junit.render(suppressed(argmax_report)),
                 junit.render(stop_report, "error")):
        assert _parse(text).get("failures") == "0"
    root = _parse(junit.render(suppressed(argmax_report)))
    assert "suppressed: baseline" in _cases(root, "flow")["x -> cls"].find("system-out").text
    assert _parse(junit.render(stop_report, "info")).get("failures") == "3"  # x and w1 -> y (GA106), GA108 of w1
    assert _parse(junit.render(stop_report, "warning")).get("failures") == "1"


def test_a_finding_about_no_pair_gets_its_own_case(disconnected_report):
    root = _parse(junit.render(disconnected_report, "warning"))
    (case,) = _cases(root, "findings").values()
    assert case.get("name") == "GA108 disconnected-source: unused"
    assert case.find("failure").get("type") == "GA108"
    assert len(_cases(root, "flow")) == len(disconnected_report.flow)


def test_numeric_checks_are_cases_with_their_outcome(numeric_report):
    root = _parse(junit.render(numeric_report))
    numeric = _cases(root, "numeric")
    outcome = {name: next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "pass")
               for name, case in numeric.items()}
    assert sorted(outcome.values()) == ["error", "failure", "pass", "skipped"]
    (failed,) = [n for n, o in outcome.items() if o == "failure"]
    assert numeric[failed].find("failure").get("type") == "GA201"
    # The numeric finding fails its numeric check, not the (connected) flow pair as well.
    assert all(c.find("failure") is None for c in _cases(root, "flow").values())
    (suite,) = root.findall("testsuite")
    n_cases = len(numeric_report.flow) + len(numeric_report.numeric)
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        (str(n_cases), "1", "1", "1")


def test_a_model_that_could_not_be_audited_is_an_error_case(mlp_report):
    root = _parse(junit.render_many([mlp_report], "error", [AuditFailure("m/bad", "m/bad: cannot be parsed")]))
    assert [s.get("name") for s in root.findall("testsuite")][-1] == "m/bad"
    assert root.get("errors") == "1"
    assert root.find("testsuite/testcase/error").get("message") == "m/bad: cannot be parsed"
