"""Read gradaudit JSON reports back into Reports, for `gradaudit diff` and `gradaudit merge`: the JSON
report is the contract, so what one run wrote another can render in any format."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from ..baseline import not_a_report, read_json_report, report_docs
from ..model import (
    BlockedPath,
    CheckedOutputs,
    Cut,
    Finding,
    FlowEntry,
    Isolation,
    LocalCheck,
    Note,
    NumericResult,
    OpRef,
    Output,
    PathStep,
    PrecisionResult,
    Report,
    Severity,
    Source,
    StabilityResult,
    Target,
)

T = TypeVar("T")


@dataclass(frozen=True)
class ReportFile:
    """One JSON file: its reports, and the models its run could not audit (path, error)."""

    path: str
    reports: tuple[Report, ...]
    errors: tuple[tuple[str, str], ...]


def _plain(cls: type[T], d: dict[str, Any]) -> T:
    """A dataclass of plain values (numeric results, probe cells) from its to_dict(): every key that names
    one of its fields, so that a field added later round-trips without a change here."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in d.items() if k in names})


def _shape(value: Sequence[int | None] | None) -> tuple[int | None, ...] | None:
    return None if value is None else tuple(value)


def _ref(d: dict[str, Any]) -> OpRef:
    return OpRef(d["op_type"], d["op_name"], d["function"])


def _op(d: dict[str, Any]) -> OpRef | None:
    return _ref(d) if d.get("op_type") is not None else None


def _finding(d: dict[str, Any]) -> Finding:
    return Finding(d["code"], d["rule"], Severity(d["severity"]), d["message"], d["fix"], _op(d),
                   tuple(d.get("sources", ())), tuple(d.get("outputs", ())), d.get("suppressed"),
                   d.get("confirmed_by"), d.get("probed"))


def _flow(d: dict[str, Any]) -> FlowEntry:
    return FlowEntry(d["source"], d["output"], d["status"],
                     tuple(Cut(_ref(c), c["rule"], c.get("piecewise")) for c in d.get("blocked_by", ())),
                     tuple(_ref(r) for r in d.get("unknown_by", ())),
                     tuple(Cut(_ref(c), c["rule"], c.get("piecewise")) for c in d.get("partial_by", ())),
                     bool(d.get("raises", False)))


def _path(d: dict[str, Any]) -> BlockedPath:
    steps = tuple(PathStep(s["op_type"], s["op_name"], s["function"], s.get("skipped", 0)) for s in d["steps"])
    return BlockedPath(d["source"], d["output"], steps, d["cut"])


def _isolation(d: dict[str, Any] | None) -> Isolation | None:
    if d is None:
        return None
    return Isolation(d["filesystem"], d["network"], d["memory_limit_bytes"], d["time_budget_s"],
                     tuple(d.get("missing", ())), d.get("file_size_limit_bytes"))


def _precision(d: dict[str, Any]) -> PrecisionResult:
    names = {f.name for f in fields(PrecisionResult)} - {"op"}
    return PrecisionResult(**{k: v for k, v in d.items() if k in names}, op=_op(d))


def _local(d: dict[str, Any]) -> LocalCheck:
    names = {f.name for f in fields(LocalCheck)} - {"op"}
    return LocalCheck(**{k: v for k, v in d.items() if k in names},
                      op=OpRef(d["op_type"], d["op_name"], d["function"]))


def _numeric(d: dict[str, Any]) -> NumericResult:
    names = {f.name for f in fields(NumericResult)} - {"outputs"}
    return NumericResult(**{k: v for k, v in d.items() if k in names}, outputs=CheckedOutputs.from_label(d["output"]))


def _notes(d: dict[str, Any]) -> list[Note]:
    """The notes with the stage that wrote each ("" where the report does not say: one written before
    `note_stages`)."""
    texts, stages = list(d.get("notes", ())), list(d.get("note_stages", ()))
    return [Note(stages[i] if i < len(stages) else "", text) for i, text in enumerate(texts)]


def report_from_dict(d: dict[str, Any]) -> Report:
    t = d["target"]
    return Report(
        target=Target(t["path"], t["kind"], t.get("signature"), tuple(t.get("tags", ()))),
        sources=[Source(s["name"], s["kind"], s["dtype"], _shape(s["shape"]), s["differentiable"])
                 for s in d["sources"]],
        outputs=[Output(o["name"], o["dtype"], _shape(o["shape"])) for o in d["outputs"]],
        flow=[_flow(f) for f in d["flow"]],
        findings=[_finding(f) for f in d["findings"]],
        numeric=[_numeric(n) for n in d["numeric"]],
        stability=[_plain(StabilityResult, s) for s in d["stability"]],
        precision=[_precision(p) for p in d.get("precision", ())],
        local=[_local(c) for c in d.get("local", ())],
        notes=_notes(d),
        seed=d.get("seed"),
        incomplete=list(d.get("incomplete", ())),
        paths=[_path(p) for p in d.get("paths", ())],
        isolation=_isolation(d.get("isolation")),
    )


def load(path: str) -> ReportFile:
    """A JSON report written by `--format json` / `--json` (one model or several); exit-2 errors otherwise."""
    doc = read_json_report(path, "report", "not JSON")
    try:
        errors = tuple((e["path"], e["error"]) for e in doc.get("errors", ()))
        return ReportFile(path, tuple(report_from_dict(d) for d in report_docs(doc)), errors)
    except (KeyError, TypeError, ValueError) as exc:
        raise not_a_report(path, exc) from None
