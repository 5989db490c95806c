"""Markdown for pull-request comments: verdict, counts, flow matrix, findings with fixes, Mermaid paths."""

from __future__ import annotations

import re

from gradaudit.batch import AuditFailure
from gradaudit.report import markdown

from .report_helpers import suppressed


def _mermaid_blocks(text: str) -> list[str]:
    return re.findall(r"^```mermaid\n(.*?)^```$", text, re.S | re.M)


def test_broken_path_is_a_mermaid_flowchart(argmax_report):
    text = markdown.render(argmax_report)
    (chart,) = _mermaid_blocks(text)
    lines = chart.splitlines()
    assert lines[0] == "flowchart LR"
    cut = next(line for line in lines if line.strip().startswith("cut{{"))
    assert "ArgMax 'ArgMax'" in cut and "GA103 zero-gradient" in cut
    sources = [line for line in lines if "-.->" in line]
    assert len(sources) == 3 and all(line.rstrip().endswith("cut") for line in sources)
    (out,) = [line for line in lines if "--x" in line]
    assert '"cls"' in out and "probs" not in chart


def test_verdict_counts_flow_matrix_and_fix(argmax_report):
    text = markdown.render(argmax_report)
    assert text.startswith("## ❌ fail `")
    assert "**1 error(s)**" in text
    assert "| source | `cls` | `probs` |" in text
    assert "| `x` | ❌ blocked: ArgMax | ✅ connected |" in text
    assert "**Fix:** Use a smooth surrogate" in text
    # names are full of underscores: prose escapes them so they are not emphasis
    assert r"\_\_inference\_call" in text


def test_known_cut_has_no_chart_and_is_listed_as_suppressed(argmax_report, mlp_report):
    text = markdown.render(suppressed(argmax_report))
    assert _mermaid_blocks(text) == [] and text.startswith("## ✅ pass")
    assert "<details><summary>1 suppressed or known finding(s)</summary>" in text
    assert "(baseline)" in text
    clean = markdown.render(mlp_report)
    assert _mermaid_blocks(clean) == [] and "### Findings" not in clean


def test_mermaid_labels_escape_what_mermaid_parses():
    assert markdown._label('__inference_<lambda>_7 "q" #1') == '"__inference_#lt;lambda#gt;_7 #quot;q#quot; #35;1"'


def test_many_models_have_a_summary_table_and_a_section_each(argmax_report, mlp_report):
    text = markdown.render_many([argmax_report, mlp_report], "error", [AuditFailure("m/bad", "m/bad: gone")])
    assert text.startswith("## ❌ fail gradaudit: 2 audited, 1 not audited")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len([r for r in rows if "[serving_default]" in r or "m/bad" in r]) == 3
    assert text.count("\n### ") == 2 and len(_mermaid_blocks(text)) == 1
