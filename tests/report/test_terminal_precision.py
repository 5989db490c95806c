"""The terminal's precision table: one row per source and a column per point; many sources that are fine at
every point are counted, not listed."""

from __future__ import annotations

from gradaudit.model import PrecisionResult, Report, Target
from gradaudit.report.terminal import MAX_ROWS, render_plain


def row(name: str, scale: float | None, underflow: float = 0.0, overflow: float = 0.0) -> PrecisionResult:
    return PrecisionResult("gradient", name, "float16", scale, 8, underflow, 0.0, overflow, 1.0, 1e-3,
                           loss_scale=2.0 ** 15, underflow_scaled=0.0, one_scale=True, underflow_own=0.0)


def report(rows: list[PrecisionResult]) -> Report:
    return Report(target=Target("/m", "saved_model", "serving_default"), precision=rows)


def test_each_source_and_point_is_a_cell():
    text = render_plain(report([row("a", None, underflow=0.5), row("a", 100.0, overflow=0.25), row("b", None),
                                row("b", 100.0)]))
    assert "Precision float16" in text and "own point" in text
    (a,) = [line for line in text.splitlines() if line.startswith("│ a ")]
    assert "zero 50%" in a and "inf 25%" in a
    (b,) = [line for line in text.splitlines() if line.startswith("│ b ")]
    assert b.count("ok") == 2
    assert "2**15" in text and "serves every source at once" in " ".join(text.split())


def test_many_sources_fine_everywhere_are_counted():
    many = [row(f"v{i}", None) for i in range(MAX_ROWS + 5)] + [row("bad", None, underflow=0.1)]
    text = render_plain(report(many))
    assert "bad" in text and "zero 10%" in text
    assert f"{MAX_ROWS + 5} more source(s)" in text and "│ v0 " not in text
