"""SARIF 2.1.0 for code-scanning services: one run, a rule descriptor per rule with its documentation as
help, one result per finding located at the model's graph file and at model -> signature -> function -> op."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..baseline import fingerprint
from ..model import Finding, Report, Severity
from ..rules import ALL_RULES, Rule
from .common import display_path, graph_file, with_fix
from .json_report import tool_info

if TYPE_CHECKING:
    from ..model import AuditFailure

SARIF_VERSION = "2.1.0"
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
FINGERPRINT = "gradauditIdentity/v1"


def _section(doc: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
    return match.group(1).strip() if match else ""


def _descriptor(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.slug,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": _section(rule.doc, "What it does") or rule.summary},
        "help": {"text": f"{rule.doc}\n\nFix: {rule.fix}", "markdown": f"{rule.doc}\n\n**Fix:** {rule.fix}"},
        "defaultConfiguration": {"level": LEVEL[rule.severity]},
    }


def _artifact(path: str) -> dict[str, Any]:
    """Relative to %SRCROOT% (the working directory, normally the repository root) so that code hosts
    resolve it; an absolute file URI for a model outside it."""
    shown = display_path(path)
    if os.path.isabs(shown):
        return {"uri": Path(shown).as_uri()}
    # a URI reference: a folder name's spaces, '#', '%' or '?' percent-encoded (RFC 3986), '/' kept
    return {"uri": _quoted(shown.replace(os.sep, "/")), "uriBaseId": SRCROOT}


def _quoted(path: str) -> str:
    """`path` percent-encoded: a file name's undecodable bytes (lone surrogates from the file system) as the bytes
    they were, any other lone surrogate as its escape."""
    try:
        return quote(path, safe="/", errors="surrogateescape")
    except UnicodeEncodeError:
        return quote(path, safe="/", errors="backslashreplace")


class _LogicalLocations:
    """run.logicalLocations: one entry per model, signature, function and op, each pointing at its parent."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def add(self, names: Sequence[str], kinds: Sequence[str]) -> int:
        parent = None
        for depth, (name, kind) in enumerate(zip(names, kinds)):
            fqn = "::".join(names[:depth + 1])
            if fqn not in self._index:
                entry: dict[str, Any] = {"name": name, "fullyQualifiedName": fqn, "kind": kind}
                if parent is not None:
                    entry["parentIndex"] = parent
                self._index[fqn] = len(self.entries)
                self.entries.append(entry)
            parent = self._index[fqn]
        assert parent is not None
        return parent

    def ref(self, index: int) -> dict[str, Any]:
        e = self.entries[index]
        return {"index": index, "fullyQualifiedName": e["fullyQualifiedName"], "kind": e["kind"]}


def _result(report: Report, finding: Finding, rule_index: dict[str, int], logical: _LogicalLocations
            ) -> dict[str, Any]:
    model = display_path(report.target.path)
    names, kinds = [model, report.target.signature or "-"], ["module", "function"]
    if finding.op:
        # An op is not one of SARIF's listed kinds; the spec allows another word when none fits.
        names += [finding.op.function, finding.op.op_name]
        kinds += ["function", "instruction"]
    digest = fingerprint(finding, report.target.signature)
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVEL[finding.severity],
        "message": {"text": with_fix(finding)},
        "locations": [{
            # A graph file has no lines; code hosts require a region, and line 1 stands for the file.
            "physicalLocation": {"artifactLocation": _artifact(graph_file(report)), "region": {"startLine": 1}},
            "logicalLocations": [logical.ref(logical.add(names, kinds))],
        }],
        # GitHub computes primaryLocationLineHash from the file's text when it is missing, which for a binary
        # graph changes with every export; the identity hash is what stays the same.
        "partialFingerprints": {FINGERPRINT: digest, "primaryLocationLineHash": f"{digest[:16]}:1"},
        "properties": {"rule": finding.rule, "model": model, "signature": report.target.signature,
                       "sources": list(finding.sources), "outputs": list(finding.outputs)},
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    if finding.suppressed:
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": finding.suppressed}]
    return result


def _notification(level: str, text: str, path: str) -> dict[str, Any]:
    return {"level": level, "message": {"text": text},
            "locations": [{"physicalLocation": {"artifactLocation": _artifact(path)}}]}


def to_dict(reports: Sequence[Report], fail_on: str = "error",
            failures: Sequence[AuditFailure] = ()) -> dict[str, Any]:
    tool = tool_info()
    rule_index = {r.code: i for i, r in enumerate(ALL_RULES)}
    logical = _LogicalLocations()
    results = [_result(r, f, rule_index, logical) for r in reports for f in r.findings]
    notifications = [_notification("error", f.error, f.path) for f in failures]
    notifications += [_notification("note", f"{display_path(r.target.path)}: {note.text}", r.target.path)
                      for r in reports for note in r.notes]
    notifications += [_notification("warning", f"{display_path(r.target.path)}: not checked: {line}", r.target.path)
                      for r in reports for line in r.incomplete]
    # Every audited graph file, so that a clean model is seen to have been audited.
    artifacts = [{"location": _artifact(path), "roles": ["analysisTarget"]}
                 for path in dict.fromkeys(graph_file(r) for r in reports)]
    cwd = Path.cwd().as_uri().rstrip("/") + "/"
    return {
        "$schema": SCHEMA_URI,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {"name": "gradaudit", "version": tool["version"],
                                "rules": [_descriptor(r) for r in ALL_RULES],
                                "properties": {"tensorflow": tool["tensorflow"]}}},
            "originalUriBaseIds": {SRCROOT: {"uri": cwd}},
            "invocations": [{"executionSuccessful": not failures, "toolExecutionNotifications": notifications,
                             "properties": {"failOn": fail_on}}],
            "artifacts": artifacts,
            "logicalLocations": logical.entries,
            "results": results,
        }],
    }


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    return json.dumps(to_dict(reports, fail_on, failures), indent=2) + "\n"


def render(report: Report, fail_on: str = "error") -> str:
    return render_many([report], fail_on)
