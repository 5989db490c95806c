"""One run, many reports: the main one (--format / --output) and machine reports beside it; terminal
output that adapts to where it goes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import jsonschema

from gradaudit.report import json_report

from .cli_helpers import SAMPLES, run


def test_every_machine_report_in_one_run(argmax, _isolated):
    result = run(argmax, "--static-only", "--format", "github", "--json", "out/r.json", "--sarif",
                 "out/sarif/r.sarif", "--junit", "out/r.xml", "--markdown", "out/r.md")
    assert result.exit_code == 1
    assert result.stdout.startswith("::error file=") and result.stderr == ""
    out = _isolated / "out"
    doc = json.loads((out / "r.json").read_text())
    jsonschema.validate(doc, json_report.schema())
    assert [f["code"] for f in doc["findings"]] == ["GA103"]
    sarif = json.loads((out / "sarif" / "r.sarif").read_text())
    assert sarif["version"] == "2.1.0" and [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["GA103"]
    junit = ET.parse(out / "r.xml").getroot()
    assert (junit.get("tests"), junit.get("failures")) == ("6", "3")
    assert "```mermaid" in (out / "r.md").read_text()


def test_main_report_to_a_file_leaves_stdout_empty(argmax, _isolated):
    result = run(argmax, "--static-only", "--format", "sarif", "-o", "r.sarif", "--markdown", "r.md")
    assert result.exit_code == 1 and result.stdout == ""
    assert json.loads((_isolated / "r.sarif").read_text())["version"] == "2.1.0"
    assert (_isolated / "r.md").read_text().startswith("## ❌ fail")


def test_unwritable_report_is_exit_2(argmax, _isolated):
    (_isolated / "afile").write_text("")
    result = run(argmax, "--static-only", "--json", "afile/r.json")
    assert result.exit_code == 2 and "cannot write the report" in result.stderr


def _sgr_colours(text: str) -> set[str]:
    """The colour parameters (30-38, 40-48, 90-107) of the escape sequences in `text`."""
    params = {p for seq in re.findall(r"\x1b\[([0-9;]*)m", text) for p in seq.split(";") if p}
    return {p for p in params if re.fullmatch(r"3[0-8]|4[0-8]|9[0-7]|10[0-7]", p)}


def test_no_colour_off_a_terminal_colour_when_forced_and_no_colour_wins(stop):
    plain = run(stop, "--static-only").stdout
    assert "\x1b[" not in plain
    forced = run(stop, "--static-only", env={"FORCE_COLOR": "1"}).stdout
    assert _sgr_colours(forced)
    no_color = run(stop, "--static-only", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout
    assert not _sgr_colours(no_color) and "StopGradient" in no_color


def test_a_ci_log_is_not_wrapped_at_80_columns():
    lines = run(SAMPLES / "stop_gradient", "--static-only").stdout.splitlines()
    verdict = "PASS: 0 error(s), 1 warning(s), 1 info; flow: 2 blocked, 1 connected (fail-on: error)"
    assert len(verdict) > 80 and verdict in lines
