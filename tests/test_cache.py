"""The cache's key and entries (cache.py): what the key reads of a model, what is stored, and entries that are
not what they claim."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from gradaudit import cache
from gradaudit.api import AuditOptions
from gradaudit.model import Finding, Report, Severity, Target
from gradaudit.reconcile import reconcile
from gradaudit.results import Gate, RuntimeResult, StaticResult


def _model(samples, tmp_path, name="mlp") -> str:
    return shutil.copytree(os.path.join(samples, name), tmp_path / name)


def test_the_model_digest_reads_what_the_loader_reads_and_nothing_else(samples, tmp_path):
    model = _model(samples, tmp_path)
    digest = cache.saved_model_digest(model)
    assert "saved_model.pb" in digest and any(name.startswith("variables/") for name in digest)
    (model / "README.md").write_text("notes beside the model")
    (model / "report.json").write_text("{}")
    assert cache.saved_model_digest(model) == digest
    (model / "assets").mkdir(exist_ok=True)
    (model / "assets" / "vocab.txt").write_text("a\n")
    assert cache.saved_model_digest(model)["assets/vocab.txt"] != digest.get("assets/vocab.txt")


def test_a_fifo_in_the_model_is_never_opened_and_the_model_is_not_cached(samples, tmp_path):
    model = _model(samples, tmp_path)
    os.mkfifo(model / "variables" / "pipe")  # opening it for reading would block
    assert cache.saved_model_digest(model) is None
    assert cache.model_parts(str(model)) is None


def test_a_keras_file_is_its_bytes(tmp_path):
    path = tmp_path / "m.keras"
    path.write_bytes(b"PK\x03\x04 one")
    first = cache.model_parts(str(path))
    assert first is not None and first["kind"] == "keras"
    path.write_bytes(b"PK\x03\x04 two")
    assert cache.model_parts(str(path))["content"] != first["content"]
    assert cache.model_parts("package.module:model") is None


def test_the_options_key_holds_the_inputs_file_content(tmp_path):
    inputs = tmp_path / "x.npz"
    inputs.write_bytes(b"one")
    first = cache.options_parts(AuditOptions(inputs_file=str(inputs)), False)
    inputs.write_bytes(b"two")
    assert cache.options_parts(AuditOptions(inputs_file=str(inputs)), False) != first
    assert cache.options_parts(AuditOptions(), True) != cache.options_parts(AuditOptions(), False)


def test_a_load_ops_package_no_distribution_ships_is_not_cached():
    with pytest.raises(cache.Uncacheable, match="gradaudit_no_such_package"):
        cache.options_parts(AuditOptions(load_ops=("gradaudit_no_such_package",)), False)
    assert cache.options_parts(AuditOptions(load_ops=("numpy",)), False)["load_ops"][0][1]["numpy"]


def _static() -> StaticResult:
    return StaticResult(Target("/m", "saved_model", "serving_default"), (), (), (), (), (), ())


def test_a_runtime_that_brought_no_result_is_not_stored():
    stopped = reconcile(_static(), Gate(run=True), RuntimeResult(stopped="did not finish within --timeout 1 s"))
    finished = reconcile(_static(), Gate(run=True), RuntimeResult())
    assert stopped.runtime_stopped and not finished.runtime_stopped
    assert not cache.storable([stopped], AuditOptions()) and cache.storable([finished], AuditOptions())
    assert not cache.storable([], AuditOptions())


def test_with_allow_unsafe_ops_only_reports_without_unsafe_ops_are_stored():
    target = Target("/m", "saved_model", "serving_default")
    unsafe = Report(target, findings=[Finding("GA401", "unsafe-op", Severity.ERROR, "ReadFile", "fix")])
    clean = Report(target)
    allowed = AuditOptions(allow_unsafe_ops=True)
    assert cache.storable([unsafe], AuditOptions()) and cache.storable([clean], allowed)
    assert not cache.storable([unsafe], allowed)
    assert not cache.storable([Report(Target("/m.keras", "keras", None))], allowed)  # its Python code, unhashed


@pytest.mark.parametrize("text", ["", "{", "null", "[]", '{"cache": {}, "tool": {}}',
                                  '{"cache": {"format": 1, "key": "k", "reports": [{"target": 1}]}, '
                                  '"tool": {"tensorflow": "2"}}',
                                  '{"cache": {"format": 1, "key": "k", "reports": []}, "tool": {"tensorflow": "2"}}',
                                  "[" * 100_000])
def test_an_entry_that_is_not_one_is_a_miss(text, tmp_path):
    path = tmp_path / "e.json"
    path.write_text(text)
    assert cache.read_entry(str(path), "k", b"secret") is None
    assert cache.read_entry(str(tmp_path / "missing.json"), "k", b"secret") is None


def test_an_entry_is_the_json_report_with_its_reports_field_by_field(audited, tmp_path):
    report = audited("classifier_argmax", static_only=True)
    slot = cache.Slot("m", "name", "k", {"environment": {"TF_X": "secret"}, "model": {}})
    text = cache._entry([report], slot, b"the signing secret")
    doc = json.loads(text)
    assert doc["target"]["path"] == report.target.path and doc["findings"][0]["code"] == "GA103"
    assert "secret" not in text  # the environment's values are hashed, not written; the signing secret is not in it
    (tmp_path / "e.json").write_text(text)
    reports, tensorflow = cache.read_entry(str(tmp_path / "e.json"), "k", b"the signing secret")
    assert reports == (report,) and tensorflow == doc["tool"]["tensorflow"]
    assert cache.read_entry(str(tmp_path / "e.json"), "another key", b"the signing secret") is None


def test_a_forged_or_foreign_entry_is_a_miss(audited, tmp_path):
    """The red team's attack: the findings edited out of an entry (the key still right) made a hostile model pass.
    An entry whose signature is not this secret's, or that was changed after it was signed, is never read."""
    report = audited("classifier_argmax", static_only=True)
    slot = cache.Slot("m", "name", "k", {"environment": {}, "model": {}})
    path = tmp_path / "e.json"
    doc = json.loads(cache._entry([report], slot, b"mine"))
    path.write_text(json.dumps(doc))
    assert cache.read_entry(str(path), "k", b"mine") is not None
    assert cache.read_entry(str(path), "k", b"another machine's") is None
    for entry in (doc["cache"]["reports"][0], doc):
        entry["findings"] = []
    path.write_text(json.dumps(doc))  # the findings gone, the signature kept
    assert cache.read_entry(str(path), "k", b"mine") is None
    del doc["cache"]["signature"]
    path.write_text(json.dumps(doc))
    assert cache.read_entry(str(path), "k", b"mine") is None


def test_the_signing_secret_is_the_variable_or_a_private_key_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADAUDIT_CACHE_KEY", "from-ci-secrets")
    assert cache.signing_key() == b"from-ci-secrets"
    monkeypatch.delenv("GRADAUDIT_CACHE_KEY")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    first = cache.signing_key()
    key_file = tmp_path / "gradaudit" / "cache-key"
    assert len(first) >= 32 and key_file.read_bytes() == first and (key_file.stat().st_mode & 0o777) == 0o600
    assert cache.signing_key() == first  # made once
