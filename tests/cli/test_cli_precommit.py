"""The pre-commit hook: which staged files it picks, and that the CLI takes them as pre-commit passes them."""

from __future__ import annotations

import json
import re

import pytest

from .cli_helpers import REPO, run

yaml = pytest.importorskip("yaml")  # PyYAML: in the image, not a declared test dependency


def _hook() -> dict:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    return hook


def test_hook_picks_graph_files_only():
    hook = _hook()
    assert hook["id"] == "gradaudit" and hook["entry"] == "gradaudit" and hook["language"] == "python"
    files = re.compile(hook["files"])
    for path in ("saved_model.pb", "models/clf/saved_model.pb", "export/1/saved_model.pbtxt"):
        assert files.search(path), path
    for path in ("models/clf/variables/variables.index", "models/clf/saved_model.pb.orig",
                 "models/my_saved_model.pb", "models/clf/fingerprint.pb"):
        assert not files.search(path), path


def test_cli_takes_the_files_pre_commit_passes(argmax, mlp):
    hook = _hook()
    result = run(*hook["args"], argmax / "saved_model.pb", mlp / "saved_model.pb", "--format", "json")
    assert result.exit_code == 1
    assert [r["verdict"] for r in json.loads(result.stdout)["reports"]] == ["fail", "pass"]
