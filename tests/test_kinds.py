"""The registry of target kinds (kinds.py): a kind registered from its own module is told, audited, cached and
named in reports without any other module knowing it."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import gradaudit
from gradaudit import kinds
from gradaudit.cli import main
from gradaudit.report.common import graph_file

PREFIX = "toy+"


def _audit_toy(target: str, options):
    """A toy kind wrapping the SavedModel kind: `toy+FOLDER` is the SavedModel in FOLDER."""
    saved_model = kinds.named("saved_model")
    assert saved_model is not None
    return saved_model.audit(target.removeprefix(PREFIX), options)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setattr(kinds, "_KINDS", list(kinds._KINDS))  # registered for this test only
    return kinds.register(kinds.Kind("toy", lambda t: t.startswith(PREFIX), _audit_toy,
                                     uncached="toy targets are not cached"))


def test_the_built_in_kinds_are_told_by_the_target_string(tmp_path):
    assert kinds.kind_of("model.keras").name == kinds.kind_of("model.h5").name == "keras"
    assert kinds.kind_of("package.module:model").name == kinds.kind_of("file.py:fn").name == "python"
    assert kinds.kind_of(str(tmp_path)).name == kinds.kind_of("missing/folder").name == "saved_model"
    folder = tmp_path / "a:b"  # a folder is never a module:attr
    folder.mkdir()
    assert kinds.kind_of(str(folder)).name == "saved_model"


def test_a_kind_is_registered_once(toy):
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(toy)


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_registered_kind_is_audited_through_the_api_and_the_cli(toy, samples, tmp_path):
    mlp = os.path.join(samples, "mlp")
    direct = gradaudit.audit(mlp, timeout=None)
    via_toy = gradaudit.audit(PREFIX + mlp, timeout=None)
    assert kinds.kind_of(PREFIX + mlp) is toy
    assert via_toy.target == direct.target and via_toy.verdict() == direct.verdict()
    assert [f.code for f in via_toy.findings] == [f.code for f in direct.findings]
    assert graph_file(via_toy) == os.path.join(mlp, "saved_model.pb")  # named as the kind it wraps names it

    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [PREFIX + mlp, "--timeout", "0", "--json", str(out), "--cache",
                                       str(tmp_path / "cache")])
    doc = json.loads(out.read_text())
    assert result.exit_code in (0, 1), result.output
    assert doc["target"]["path"] == mlp and doc["target"]["kind"] == "saved_model"
    assert [f["code"] for f in doc["findings"]] == [f.code for f in direct.findings]
    assert "gradaudit: --cache: toy targets are not cached" in result.output
