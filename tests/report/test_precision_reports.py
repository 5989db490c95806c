"""The --precision results in the HTML and Markdown reports: sample models audited with `precision="float16"`
(in-process), each table cell holding its result's fractions, each point its loss scale and whether one scale
serves every source, the forward side's ops where the model has them; names escaped; no section without
--precision."""

from __future__ import annotations

import dataclasses
import math
import re
from html.parser import HTMLParser

import pytest

from gradaudit.api import audit
from gradaudit.model import OpRef, PrecisionResult, Report, Target
from gradaudit.report import html, markdown
from gradaudit.report.common import MAX_ROWS, md_code
from gradaudit.report.precision_rows import FRACTIONS, precision_tables

from .report_helpers import SAMPLES

MODELS = ("ratio_naive", "mlp", "unstable_norm")  # unstable_norm: a Mul overflows at the large probe scales


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return {name: audit(str(SAMPLES / name), precision="float16") for name in MODELS}


class _Tables(HTMLParser):
    """The precision tables of a page: per table its kind, and per body row its name and cells' attributes and
    text; the footer rows by class."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._row: dict | None = None
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "precision" in (a.get("class") or ""):
            self.tables.append({"kind": a["data-kind"], "rows": [], "foot": {}})
        elif not self.tables or self.tables[-1].get("done"):
            return
        elif tag == "tr":
            self._row = {"name": a.get("data-name"), "class": a.get("class"), "cells": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {**a, "text": ""}

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def handle_endtag(self, tag):
        if not self.tables or self.tables[-1].get("done"):
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row["cells"].append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            t = self.tables[-1]
            if self._row["class"] in ("loss-scale", "one-scale"):
                t["foot"][self._row["class"]] = self._row["cells"][1:]
            elif self._row["name"] is not None:
                t["rows"].append(self._row)
            self._row = None
        elif tag == "table":
            self.tables[-1]["done"] = True


def _html_tables(report: Report) -> list[dict]:
    parser = _Tables()
    parser.feed(html.render(report))
    return parser.tables


def _percents(text: str) -> dict[str, float]:
    """`zero 50%, subnormal 1.2%` -> {"zero": 0.5, "subnormal": 0.012} (the share at the loss scale apart)."""
    text = text.split(" (")[0]
    found = re.findall(r"(zero|subnormal|inf|not finite before the cast) ([0-9.e+-]+)%", text)
    return {word: float(v) / 100 for word, v in found}


def _expected(p: PrecisionResult) -> dict[str, float]:
    return {word: getattr(p, name) for word, name in FRACTIONS if getattr(p, name)}


def _results(report: Report, kind: str) -> dict[tuple[str, float | None], PrecisionResult]:
    return {(p.name, p.scale): p for p in report.precision if p.kind == kind}


@pytest.mark.slow  # a model's numeric checks, seconds
@pytest.mark.parametrize("name", MODELS)
def test_html_cells_hold_each_results_fractions(reports, name):
    report = reports[name]
    tables = _html_tables(report)
    kinds = [t["kind"] for t in tables]
    assert kinds == ["gradient"] + (["activation"] * any(p.kind == "activation" for p in report.precision))
    for table in tables:
        results = _results(report, table["kind"])
        seen = set()
        for row in table["rows"]:
            for cell in row["cells"][1:]:
                if "data-underflow" not in cell:
                    continue
                scale = float(cell["data-scale"]) if cell["data-scale"] else None
                p = results[row["name"], scale]
                seen.add((p.name, p.scale))
                assert (float(cell["data-underflow"]), float(cell["data-subnormal"]), float(cell["data-overflow"])) \
                    == (p.underflow, p.subnormal, p.overflow)
                shown = _percents(cell["text"])
                assert shown.keys() == _expected(p).keys()
                for word, v in _expected(p).items():
                    assert shown[word] == pytest.approx(v, rel=5e-3)
                if not _expected(p):
                    assert cell["text"] == ("ok" if p.entries else "no nonzero entry")
        assert seen == set(results)  # every result has its cell (fewer than MAX_ROWS sources here)


@pytest.mark.parametrize("name", MODELS)
def test_html_footer_holds_each_points_loss_scale_and_one_scale(reports, name):
    report = reports[name]
    (table,) = [t for t in _html_tables(report) if t["kind"] == "gradient"]
    points = list(dict.fromkeys(p.scale for p in report.precision if p.kind == "gradient"))
    first = {}
    for p in report.precision:
        if p.kind == "gradient":
            first.setdefault(p.scale, p)
    scales, ones = table["foot"]["loss-scale"], table["foot"]["one-scale"]
    assert len(scales) == len(ones) == len(points)
    for sc, cell, one in zip(points, scales, ones):
        expected = first[sc].loss_scale
        if expected:
            assert float(cell["data-loss-scale"]) == expected
            assert cell["text"] == f"2**{round(math.log2(expected))}"
        else:
            assert cell["data-loss-scale"] == "" and cell["text"] == ""
        assert one["text"] == {True: "yes", False: "no", None: ""}[first[sc].one_scale]


def test_the_forward_sides_ops_are_listed(reports):
    report = reports["unstable_norm"]
    activations = [p for p in report.precision if p.kind == "activation"]
    assert activations and any(p.overflow for p in activations)
    (table,) = [t for t in _html_tables(report) if t["kind"] == "activation"]
    assert [r["name"] for r in table["rows"]] == list(dict.fromkeys(p.name for p in activations))
    text = markdown.render(report)
    for p in activations:
        assert f"`{p.name}`" in text


def _md_tables(text: str) -> list[list[list[str]]]:
    """The pipe tables inside the precision <details>, as rows of cells."""
    start = text.index("<details><summary>Precision ")
    block = text[start:text.index("</details>", start)]
    tables, current = [], []
    for line in block.splitlines() + [""]:
        if line.startswith("|"):
            current.append([c.strip() for c in line.strip("|").split(" | ")])
        elif current:
            tables.append(current)
            current = []
    return tables


@pytest.mark.parametrize("name", MODELS)
def test_markdown_cells_hold_each_results_fractions(reports, name):
    report = reports[name]
    text = markdown.render(report)
    assert text.count("<details><summary>Precision float16:") == 1
    tables = _md_tables(text)
    assert len(tables) == len(precision_tables(report))
    for table, view in zip(tables, precision_tables(report)):
        header, _, *body = table
        assert header[1:] == ["own point" if sc is None else f"{sc:g}" for sc in view.points]
        results = _results(report, view.kind)
        rows = {r[0].strip("`"): r[1:] for r in body if r[0].startswith("`")}
        assert set(rows) == {p.name for p in results.values()}
        for (source, scale), p in results.items():
            cell = rows[source][view.points.index(scale)]
            shown = _percents(cell.replace("\\", ""))
            assert shown.keys() == _expected(p).keys()
            for word, v in _expected(p).items():
                assert shown[word] == pytest.approx(v, rel=5e-3)
        if view.kind == "gradient":
            (scales,) = [r[1:] for r in body if r[0] == "loss scale"]
            (ones,) = [r[1:] for r in body if r[0] == "one scale serves every source"]
            assert scales == [f"`2**{round(math.log2(s))}`" if s else "" for s in view.loss_scales]
            assert ones == [{True: "yes", False: "no", None: ""}[b] for b in view.one_scale]
            first = {}
            for p in report.precision:
                if p.kind == "gradient":
                    first.setdefault(p.scale, p)
            assert view.loss_scales == tuple(first[sc].loss_scale for sc in view.points)


def test_no_section_without_precision(mlp_report):
    assert not mlp_report.precision
    page = html.render(mlp_report)
    assert "<h3>Precision" not in page and 'class="grid precision"' not in page
    assert "Precision" not in markdown.render(mlp_report)


def test_underflow_names_the_share_left_at_the_loss_scale_and_many_fine_sources_are_counted():
    def row(name: str, underflow: float = 0.0) -> PrecisionResult:
        return PrecisionResult("gradient", name, "bfloat16", None, 8, underflow, 0.0, 0.0, 1e-3, 1e-40,
                               loss_scale=2.0 ** 20, underflow_scaled=underflow / 4, one_scale=False)

    report = Report(target=Target("/m", "saved_model", "serving_default"),
                    precision=[row("bad", 0.5)] + [row(f"v{i}") for i in range(MAX_ROWS)])
    (table,) = _html_tables(report)
    ((cell,),) = [r["cells"][1:] for r in table["rows"]]
    assert [r["name"] for r in table["rows"]] == ["bad"]
    assert cell["text"] == "zero 50% (12.5% zero at the loss scale)"
    assert table["foot"]["one-scale"][0]["text"] == "no" and table["foot"]["loss-scale"][0]["text"] == "2**20"
    page = html.render(report)
    assert f"<td>{MAX_ROWS} more</td>" in page
    text = markdown.render(report)
    assert f"Precision bfloat16: 1 of {MAX_ROWS + 1} source(s) lose gradient entries" in text
    assert "| `bad` | zero 50% (12.5% zero at the loss scale) |" in text
    assert f"| {MAX_ROWS} more | none zero or inf |" in text and "`v0`" not in text


def test_names_are_escaped(reports):
    evil = "<img src=x onerror=alert(1)>|`@user"
    report = reports["unstable_norm"]
    renamed = dataclasses.replace(report, precision=[
        dataclasses.replace(p, name=evil, op=OpRef("Mul", evil, "f") if p.op else None) for p in report.precision])
    page = html.render(renamed)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    text = markdown.render(renamed)
    rows = [line for line in text.splitlines() if line.startswith(f"| {md_code(evil, cell=True)} |")]
    assert len(rows) == 2  # the source and the op, each as a code span whose | does not start a cell
    lines = text.splitlines()
    for row in rows:  # each row right under its table's separator, with as many cells
        separator = lines[lines.index(row) - 1]
        assert separator.startswith("| --- |")
        assert len(re.split(r"(?<!\\)\|", row)) == len(separator.split("|"))
