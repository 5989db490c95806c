"""The JSON report: the contract CI systems read (schema_version 1, see schema.json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..model import Report, combined_verdict

if TYPE_CHECKING:
    from ..model import AuditFailure

SCHEMA_VERSION = 1


# TensorFlow's version as a cached report's run recorded it (cache.py: its key holds TensorFlow's installed
# version, so it is this one's): a run whose reports all come from the cache renders it without importing TensorFlow
_RECORDED_TENSORFLOW: list[str] = []


def tool_info() -> dict[str, str]:
    from ..version import __version__

    return {"name": "gradaudit", "version": __version__, "tensorflow": _tensorflow_version()}


def _tensorflow_version() -> str:
    if _RECORDED_TENSORFLOW and sys.modules.get("tensorflow") is None:
        return _RECORDED_TENSORFLOW[0]
    try:
        import tensorflow as tf

        version: str = tf.__version__
        return version
    except ImportError:  # pragma: no cover - TensorFlow is a dependency
        return "unknown"


def record_tensorflow_version(version: str) -> None:
    """The version a cached report's run recorded, for `tool` when TensorFlow is not imported (cache.py)."""
    _RECORDED_TENSORFLOW[:] = [version]


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
        "notes": [n.text for n in report.notes],
        "note_stages": [n.stage for n in report.notes],
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
