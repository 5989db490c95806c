"""SARIF: valid 2.1.0 (our schema of what we emit, and the official one when it is at hand), rule
descriptors, severity mapping, locations, fingerprints and suppressions."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import jsonschema
import pytest

from gradaudit.batch import AuditFailure
from gradaudit.model import Note, OpRef
from gradaudit.report import sarif
from gradaudit.rules import ALL_RULES, DOC_SECTIONS

from .report_helpers import REPO, suppressed

SUBSET_SCHEMA = json.loads((Path(__file__).with_name("sarif_subset_schema.json")).read_text())
# The official schema is not part of the project; CI has the shared folder beside the clone.
OFFICIAL = Path(os.environ.get("SARIF_SCHEMA", REPO.parent / "shared" / "schemas" / "sarif-schema-2.1.0.json"))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def _validate(doc: dict) -> None:
    jsonschema.Draft202012Validator(SUBSET_SCHEMA).validate(doc)


@pytest.fixture
def many_doc(argmax_report, stop_report, disconnected_report):
    noted = dataclasses.replace(stop_report, notes=[Note("numeric", "numeric checks are not available")])
    reports = [suppressed(argmax_report, "ignore-ops Arg*"), noted, disconnected_report]
    return sarif.to_dict(reports, "error", [AuditFailure("models/broken", "models/broken: cannot be parsed")])


def test_single_and_many_reports_are_valid(argmax_report, mlp_report, many_doc):
    for doc in (json.loads(sarif.render(argmax_report)), json.loads(sarif.render(mlp_report)), many_doc):
        _validate(doc)
    assert len(many_doc["runs"][0]["results"]) == 4


def test_subset_schema_rejects_what_sarif_forbids(argmax_report):
    doc = sarif.to_dict([argmax_report])
    doc["runs"][0]["results"][0]["level"] = "info"  # SARIF says note
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc)


@pytest.mark.skipif(not OFFICIAL.is_file(), reason="official SARIF schema not at hand")
def test_valid_against_the_official_schema(many_doc):
    schema = json.loads(OFFICIAL.read_text())
    jsonschema.Draft4Validator(schema).validate(many_doc)


def test_one_descriptor_per_rule_with_its_doc_as_help(argmax_report):
    rules = sarif.to_dict([argmax_report])["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in ALL_RULES]
    for descriptor, rule in zip(rules, ALL_RULES):
        assert descriptor["name"] == rule.slug
        assert descriptor["help"]["markdown"].startswith(rule.doc)
        assert all(f"## {s}" in descriptor["help"]["text"] for s in DOC_SECTIONS)
        assert descriptor["defaultConfiguration"]["level"] == sarif.LEVEL[rule.severity]


def test_severity_maps_to_error_warning_note(argmax_report, stop_report, disconnected_report):
    results = sarif.to_dict([argmax_report, disconnected_report, stop_report])["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [("GA103", "error"), ("GA108", "warning"),
                                                           ("GA108", "warning"), ("GA106", "note")]
    rules = sarif.to_dict([argmax_report])["runs"][0]["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)


def test_locations_point_at_the_graph_file_and_model_signature_function_op(argmax_report):
    run = sarif.to_dict([argmax_report])["runs"][0]
    (result,) = run["results"]
    (loc,) = result["locations"]
    assert loc["physicalLocation"]["artifactLocation"] == {
        "uri": "sample_models/classifier_argmax/saved_model.pb", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == REPO.as_uri() + "/"
    assert [a["location"] for a in run["artifacts"]] == [loc["physicalLocation"]["artifactLocation"]]
    chain, index = [], loc["logicalLocations"][0]["index"]
    while index is not None:
        entry = run["logicalLocations"][index]
        chain.append((entry["kind"], entry["name"]))
        index = entry.get("parentIndex")
    op = argmax_report.findings[0].op
    assert chain[::-1] == [("module", "sample_models/classifier_argmax"), ("function", "serving_default"),
                           ("function", op.function), ("instruction", "ArgMax")]


def test_a_model_outside_the_working_directory_gets_an_absolute_uri(argmax_report, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loc = sarif.to_dict([argmax_report])["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": (REPO / "sample_models/classifier_argmax/saved_model.pb").as_uri()}


def test_fingerprints_ignore_the_function_counter_but_not_the_outputs(argmax_report):
    f = argmax_report.findings[0]
    sig = argmax_report.target.signature
    renumbered = dataclasses.replace(f, op=OpRef(f.op.op_type, f.op.op_name, f.op.function + "99"))
    other_output = dataclasses.replace(f, outputs=(*f.outputs, "probs"))
    fp = sarif.fingerprint(f, sig)
    assert sarif.fingerprint(renumbered, sig) == fp
    assert sarif.fingerprint(other_output, sig) != fp
    assert sarif.fingerprint(f, "other_signature") != fp
    (result,) = sarif.to_dict([argmax_report])["runs"][0]["results"]
    assert result["partialFingerprints"][sarif.FINGERPRINT] == fp


def test_suppressed_and_baselined_findings_carry_suppressions(argmax_report, stop_report):
    doc = sarif.to_dict([suppressed(argmax_report, "baseline"), stop_report])
    known, *active = doc["runs"][0]["results"]
    assert known["suppressions"] == [{"kind": "external", "status": "accepted", "justification": "baseline"}]
    assert len(active) == 2 and all("suppressions" not in a for a in active)


def test_failures_and_notes_become_notifications(many_doc):
    (invocation,) = many_doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    levels = [(n["level"], n["message"]["text"]) for n in invocation["toolExecutionNotifications"]]
    assert ("error", "models/broken: cannot be parsed") in levels
    assert any(level == "note" and "numeric checks" in text for level, text in levels)


def test_a_folder_name_that_is_not_uri_text_is_percent_encoded(argmax_report, tmp_path, monkeypatch):
    """The red team's folder names (a space, '#', '%', '?') went into artifactLocation.uri as they were: not a URI
    reference, and '#' starts a fragment."""
    import shutil
    from dataclasses import replace
    from urllib.parse import unquote

    folder = tmp_path / "my models #1 %20 ?x"
    shutil.copytree(REPO / "sample_models/classifier_argmax", folder)
    monkeypatch.chdir(tmp_path)
    report = replace(argmax_report, target=replace(argmax_report.target, path=folder.name))
    loc = sarif.to_dict([report])["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert " " not in loc["uri"] and "#" not in loc["uri"] and "?" not in loc["uri"]
    assert unquote(loc["uri"]) == f"{folder.name}/saved_model.pb" and loc["uriBaseId"] == "%SRCROOT%"
