"""The HTML report as text: self-contained, escaped, every pair a cell, statuses and verdicts it does not
know rendered generically. The page in a real browser: test_html_browser.py."""

from __future__ import annotations

import dataclasses
import re

from gradaudit.batch import AuditFailure
from gradaudit.model import Cut, FlowEntry, OpRef
from gradaudit.report import html

from .report_helpers import suppressed


def _cells(page: str) -> list[tuple[str, str]]:
    """(status, title) of every heatmap cell."""
    return re.findall(r'<td class="cell [^"]*" data-status="([^"]+)" data-output="[^"]*" title="([^"]*)"', page)


def test_one_cell_per_pair_with_its_status_and_cut(argmax_report):
    page = html.render(argmax_report)
    cells = _cells(page)
    assert len(cells) == len(argmax_report.flow) == 6
    blocked = [title for status, title in cells if status == "blocked"]
    assert len(blocked) == 3 and all("ArgMax &#39;ArgMax&#39; (zero-gradient)" in t for t in blocked)
    assert sorted(s for s, _ in cells) == sorted(e.status for e in argmax_report.flow)


def test_self_contained_no_network_reference(argmax_report, mlp_report):
    page = html.render_many([argmax_report, mlp_report])
    assert "<style>" in page and "<script>" in page and "default-src 'none'" in page
    # the only URL is the SVG namespace, which names and loads nothing
    urls = set(re.findall(r"""(?:src|href)=["']?(https?:[^"' >]+)""", page))
    assert urls == set()
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}


def test_blocked_pair_path_names_the_cut_between_source_and_output(argmax_report):
    page = html.render(argmax_report)
    assert len(re.findall(r'<details class="path" id="[^"]+" data-source="x" data-output="cls"', page)) == 1
    assert "cut by <strong class=\"cut-op\">ArgMax &#39;ArgMax&#39;</strong>" in page
    # the chain: source node, ops, the cut node (marked), output node, in that order
    chain = page[page.index('data-source="x" data-output="cls"'):]
    chain = chain[:chain.index("</details>")]
    kinds = re.findall(r'<g class="node (\w+)">', chain)
    assert kinds[0] == "source" and kinds[-1] == "output" and kinds.count("cut") == 1
    assert kinds.index("cut") > 1  # MatMul, AddV2, Softmax come before ArgMax
    assert "ArgMax &#39;ArgMax&#39; in __inference" in chain and "← cuts the gradient" in chain


def test_blocked_cells_link_to_their_path(stop_report):
    page = html.render(stop_report)
    links = re.findall(r'data-status="blocked"[^>]*data-path="([^"]+)"><a href="#([^"]+)">', page)
    assert len(links) == 2 and all(a == b and f'id="{a}"' in page for a, b in links)


def test_names_are_escaped(argmax_report):
    evil = "<img src=x onerror=alert(1)>"
    renamed = dataclasses.replace(
        argmax_report,
        sources=[dataclasses.replace(s, name=evil) if s.name == "x" else s for s in argmax_report.sources],
        flow=[dataclasses.replace(e, source=evil) if e.source == "x" else e for e in argmax_report.flow])
    page = html.render(renamed)
    assert evil not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_findings_grouped_by_rule_with_docs_and_suppressed_apart(argmax_report, stop_report):
    page = html.render(argmax_report)
    rule = page[page.index('<article class="rule" data-code="GA103">'):]
    rule = rule[:rule.index("</article>")]
    assert "zero-gradient" in rule and "What it does" in rule and "Use instead" in rule
    assert "<dt>fix</dt>" in rule and "<dt>sources</dt>" in rule
    known = html.render(suppressed(stop_report, "baseline"))
    assert "No active findings." in known
    part = known[known.index('<details class="suppressed panel">'):]
    assert "GA106" in part and "baseline</td>" in part


def test_unknown_status_and_incomplete_verdict_are_coloured(argmax_report):
    ref = OpRef("Frobnicate", "frob", "f")
    flow = [FlowEntry("x", "probs", "unknown", unknown_by=(ref,)) if (e.source, e.output) == ("x", "probs")
            else FlowEntry(e.source, e.output, "teleported") if (e.source, e.output) == ("dense/bias", "probs")
            else e for e in argmax_report.flow]
    report = dataclasses.replace(argmax_report, flow=flow, findings=[])
    assert report.verdict() == "incomplete"
    page = html.render(report)
    assert 'class="badge v-incomplete"' in page
    assert '<td class="cell s-unknown" data-status="unknown"' in page
    assert "Frobnicate &#39;frob&#39;" in page
    # a status this version does not know still gets a cell, a filter box and a neutral colour
    assert '<td class="cell s-teleported s-other" data-status="teleported"' in page
    assert 'data-status="teleported" checked' in page


def test_index_for_several_models_and_the_ones_not_audited(argmax_report, mlp_report):
    page = html.render_many([argmax_report, mlp_report], "error", [AuditFailure("/m/broken", "/m/broken: bad")])
    index = page[page.index('<section id="index">'):page.index("</section>")]
    assert index.count("<tr data-model=") == 2 and 'href="#m0"' in index and 'href="#m1"' in index
    assert "not audited" in index and "/m/broken: bad" in index
    assert re.search(r'id="verdict" class="badge v-fail">fail<', page)
    assert page.count('<section class="model"') == 2


def test_numeric_bars_on_a_log_scale(numeric_report):
    page = html.render(numeric_report)
    bars = re.findall(r'<div class="bar" data-status="(\w+)"[^>]*>(.*?)</div>', page)
    assert [s for s, _ in bars] == ["pass", "fail", "skipped", "error"]
    # rel_error 1e-3 on the axis 1e-16 .. 1: (16 - 3) / 16 of the width; no value, no bar
    assert 'style="width: 81.25%"' in dict(bars)["fail"]
    assert dict(bars)["skipped"] == "" and "why skipped" in page
    # the check's error bound 1e-8 marked on the same axis: (16 - 8) / 16
    assert 'class="bound" style="left: 50.0%"' in dict(bars)["fail"] and "(bound 1.0e-08)" in page


def test_probe_ladder_names_the_op_of_a_nonfinite_cell(argmax_report):
    from gradaudit.model import StabilityResult

    ladder = [StabilityResult("x", "probs", 1.0, "ok"),
              StabilityResult("x", "probs", 1e-30, "nonfinite_gradient", "Log", "model/Log", "NaN gradient")]
    page = html.render(dataclasses.replace(argmax_report, stability=ladder))
    table = page[page.index('<table class="grid ladder" data-output="probs">'):]
    table = table[:table.index("</table>")]
    assert "<th>1e-30</th><th>1</th>" in table
    assert re.search(r"""class="p p-nonfinite_gradient" data-status="nonfinite_gradient" """
                     r"""title="[^"]*at Log 'model/Log'[^"]*">Log</td>""", table)


def test_flow_cut_by_two_ops_keeps_both_in_the_title(argmax_report):
    two = (Cut(OpRef("ArgMax", "ArgMax", "f"), "zero-gradient"), Cut(OpRef("Round", "r", "f"), "zero-gradient"))
    flow = [dataclasses.replace(e, blocked_by=two) if e.status == "blocked" else e for e in argmax_report.flow]
    titles = [t for s, t in _cells(html.render(dataclasses.replace(argmax_report, flow=flow))) if s == "blocked"]
    assert all("ArgMax" in t and "Round &#39;r&#39;" in t for t in titles)


def test_a_thousand_blocked_pairs_draw_the_first_chains_and_count_the_rest(argmax_report):
    (path,) = [p for p in argmax_report.paths if p.source == "x"]
    many = [dataclasses.replace(path, source=f"v{k}") for k in range(html.MAX_DRAWN + 50)]
    page = html.render(dataclasses.replace(argmax_report, paths=many))
    assert page.count('<details class="path"') == html.MAX_DRAWN
    assert "50 more blocked path(s) are not drawn" in page
