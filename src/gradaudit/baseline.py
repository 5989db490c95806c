"""Baselines: a previous JSON report whose findings are known and do not fail a run.

A finding is matched on an identity that does not move when a model is re-exported: rule code, function,
op name, and the (source, output) pairs it concerns; never on messages or positions."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import GradauditError
from .model import Finding, Report

# (code, function, op name, source, output); "" where a finding has no op, source or output.
Key = tuple[str, str, str, str, str]

# TensorFlow names every traced function `<name>_<uid>` with a process-wide counter
# (`__inference_call_21` in one export is `__inference_call_2253` in the next): the counter is no identity.
_UID = re.compile(r"_\d+$")


def stable_function(name: str) -> str:
    return _UID.sub("", name)


def _keys(code: str, function: str | None, op_name: str | None, sources: Iterable[str],
          outputs: Iterable[str]) -> frozenset[Key]:
    fn, op = stable_function(function or ""), op_name or ""
    return frozenset((code, fn, op, s, o) for s in (tuple(sources) or ("",)) for o in (tuple(outputs) or ("",)))


def identity(finding: Finding) -> frozenset[Key]:
    """One key per (source, output) pair the finding concerns: a cut reaching a new output is a new finding."""
    op = finding.op
    return _keys(finding.code, op.function if op else None, op.op_name if op else None,
                 finding.sources, finding.outputs)


def fingerprint(finding: Finding, signature: str | None) -> str:
    """A stable hex digest of the identity (and the signature), for SARIF's partialFingerprints."""
    text = json.dumps([signature or "", sorted(identity(finding))], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def path_parts(path: str) -> list[str]:
    return [p for p in re.split(r"[\\/]+", path) if p]


def common_tail(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


@dataclass(frozen=True)
class _Entry:
    parts: tuple[str, ...]  # the audited model's path, split
    signature: str | None
    keys: frozenset[Key]


@dataclass(frozen=True)
class Baseline:
    path: str
    entries: tuple[_Entry, ...]

    def keys_for(self, report: Report) -> frozenset[Key]:
        """Known keys for `report`'s model and signature. The baseline may come from another checkout, so a
        model is matched on the longest common tail of its path (`models/clf` in /ci/... and in /home/...)."""
        mine = path_parts(report.target.path)
        scored = [(common_tail(mine, list(e.parts)), e) for e in self.entries
                  if e.signature == report.target.signature]
        best = max((s for s, _ in scored), default=0)
        if best == 0:
            return frozenset()
        return frozenset(k for s, e in scored if s == best for k in e.keys)


def _entry(doc: dict[str, Any]) -> _Entry:
    target = doc["target"]
    keys: set[Key] = set()
    for f in doc["findings"]:
        keys |= _keys(f["code"], f.get("function"), f.get("op_name"), f.get("sources", ()), f.get("outputs", ()))
    return _Entry(tuple(path_parts(target["path"])), target.get("signature"), frozenset(keys))


def read_json_report(path: str, what: str, not_json: str) -> dict[str, Any]:
    """The document of a gradaudit JSON report (schema_version 1) at `path`; exit-2 errors that name `what`
    the file was read as, and say `not_json` when it does not parse."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise GradauditError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GradauditError(f"{path}: {not_json}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != 1:
        raise not_a_report(path, KeyError("schema_version"))
    return doc


def not_a_report(path: str, exc: Exception) -> GradauditError:
    return GradauditError(f"{path}: not a gradaudit JSON report (schema_version 1); missing or bad {exc}")


def report_docs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The single-model documents of a report: its `reports`, or the document itself."""
    return doc["reports"] if "reports" in doc else [doc]


def load(path: str) -> Baseline:
    """Read a gradaudit JSON report (one model or many) as a baseline."""
    doc = read_json_report(path, "baseline", "the baseline is not JSON")
    try:
        return Baseline(os.path.abspath(path), tuple(_entry(d) for d in report_docs(doc)))
    except (KeyError, TypeError) as exc:
        raise not_a_report(path, exc) from None
