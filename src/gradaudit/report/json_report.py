"""The JSON report: the contract CI systems read (schema_version 1, see schema.json)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..model import Report, combined_verdict

if TYPE_CHECKING:
    from ..model import AuditFailure

SCHEMA_VERSION = 1


def tool_info() -> dict[str, str]:
    from ..version import __version__

    try:
        import tensorflow as tf

        tf_version = tf.__version__
    except ImportError:  # pragma: no cover - TensorFlow is a dependency
        tf_version = "unknown"
    return {"name": "gradaudit", "version": __version__, "tensorflow": tf_version}


def to_dict(report: Report, fail_on: str = "error") -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": tool_info(),
        "target": {"path": report.target.path, "kind": report.target.kind,
                   "signature": report.target.signature, "tags": list(report.target.tags)},
        "verdict": report.verdict(fail_on),
        "summary": report.summary(),
        "sources": [s.to_dict() for s in report.sources],
        "outputs": [o.to_dict() for o in report.outputs],
        "flow": [f.to_dict() for f in report.flow],
        "findings": [f.to_dict() for f in report.findings],
        "numeric": [n.to_dict() for n in report.numeric],
        "stability": [s.to_dict() for s in report.stability],
        "precision": [p.to_dict() for p in report.precision],
        "local": [c.to_dict() for c in report.local],
        "notes": list(report.notes),
        "note_stages": [*report.note_stages, *[""] * (len(report.notes) - len(report.note_stages))],
        "incomplete": list(report.incomplete),
        "seed": report.seed,
        "paths": [p.to_dict() for p in report.paths],
        "isolation": report.isolation.to_dict() if report.isolation else None,
    }


def render(report: Report, fail_on: str = "error") -> str:
    return json.dumps(to_dict(report, fail_on), indent=2) + "\n"


def schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    """Several reports (models, signatures): one entry each, and the models that could not be audited."""
    total = {"error": 0, "warning": 0, "info": 0}
    for r in reports:
        for k, v in r.summary().items():
            total[k] += v
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "tool": tool_info(),
        "verdict": combined_verdict(reports, fail_on, bool(failures)),
        "summary": total, "reports": [to_dict(r, fail_on) for r in reports]}
    if failures:
        doc["errors"] = [{"path": f.path, "error": f.error} for f in failures]
    return json.dumps(doc, indent=2) + "\n"
