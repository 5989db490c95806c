"""--shard K/N and `gradaudit merge`: 3 shards cover every model of a zoo exactly once, the merged report
equals the unsharded one, and a model's shard does not depend on where the checkout lies."""

from __future__ import annotations

import json
import shutil

import pytest

from gradaudit.shard import parse, shard_key, shard_of

from .cli_helpers import SAMPLES, run

ZOO = ("classifier_argmax", "stop_gradient", "mlp", "quantize_int", "disconnected_variable", "cond", "case",
       "nested_function", "no_gradient_op")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    for k, name in enumerate(ZOO):
        shutil.copytree(SAMPLES / name, root / ("vision" if k % 2 else "text") / name)
    return root


def _json(*args) -> tuple[int, dict]:
    result = run(*args, "--static-only", "--format", "json")
    return result.exit_code, json.loads(result.stdout)


def _paths(doc: dict) -> list[str]:
    return [r["target"]["path"] for r in doc["reports"]]


def test_three_shards_cover_every_model_once_and_merge_to_the_unsharded_report(zoo, tmp_path):
    code, whole = _json("-r", zoo)
    assert len(whole["reports"]) == len(ZOO)
    shards, codes = [], []
    for k in (1, 2, 3):
        path = tmp_path / f"shard{k}.json"
        result = run("-r", zoo, "--static-only", "--shard", f"{k}/3", "--format", "json", "-o", path)
        assert f"shard {k}/3:" in result.stderr
        codes.append(result.exit_code)
        shards.append(path)
    parts = [_paths(json.loads(p.read_text())) for p in shards]
    assert sorted(p for part in parts for p in part) == sorted(_paths(whole))  # each model exactly once
    assert all(parts), "with 9 models every one of 3 shards gets some (the hash is fixed: no flakiness)"

    merged = run("merge", *shards, "--format", "json")
    assert merged.exit_code == code == 1 == max(codes)
    assert json.loads(merged.stdout) == whole  # the very same document, paths' blocked chains included

    # the same in the other formats: one report, one exit code
    html = tmp_path / "merged.html"
    again = run("merge", *reversed(shards), "--html", html)
    assert again.exit_code == 1 and "Summary (fail-on: error)" in again.stdout
    assert html.read_text().count('<section class="model"') == len(ZOO)


def test_an_empty_shard_still_writes_its_report(zoo, tmp_path):
    one = SAMPLES / "mlp"
    k = shard_of(shard_key(str(one), [str(one)]), 2)
    other = 3 - k
    path = tmp_path / "empty.json"
    result = run(one, "--static-only", "--shard", f"{other}/2", "--json", path)
    assert result.exit_code == 0
    assert json.loads(path.read_text())["reports"] == []
    assert run("merge", path, "--format", "json").exit_code == 0


def test_the_shard_depends_on_the_path_below_the_searched_folder(tmp_path):
    assert shard_key("/ci/work/zoo/vision/mlp", ["/ci/work/zoo"]) == "vision/mlp"
    assert shard_key("zoo/vision/mlp", ["zoo/"]) == "vision/mlp"
    assert shard_key("./vision/mlp", ["."]) == "vision/mlp"
    assert shard_key("models/clf", ["models/clf", "other"]) == "models/clf"  # named directly: as given
    # a fixed hash (sha256), not Python's per-process salted hash()
    assert [shard_of(f"m{i}", 3) for i in range(8)] == [shard_of(f"m{i}", 3) for i in range(8)]
    assert {shard_of(f"m{i}", 3) for i in range(30)} == {1, 2, 3}


@pytest.mark.parametrize("text", ["0/3", "4/3", "3", "a/b", "1/0"])
def test_a_bad_shard_is_a_usage_error(text, mlp):
    with pytest.raises(ValueError):
        parse(text)
    result = run(mlp, "--static-only", "--shard", text)
    assert result.exit_code == 2 and "K/N" in result.stderr


def test_merging_a_model_twice_is_an_error(mlp, tmp_path):
    path = tmp_path / "a.json"
    assert run(mlp, "--static-only", "--json", path).exit_code == 0
    result = run("merge", path, path)
    assert result.exit_code == 2 and "merge the shards of one run" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_shard_that_could_not_audit_a_model_makes_the_merge_exit_2(tmp_path):
    path = tmp_path / "broken.json"
    missing = tmp_path / "missing_model"
    run(missing, "--static-only", "--shard", "1/1", "--json", path)
    merged = run("merge", path, "--format", "json")
    assert merged.exit_code == 2
    assert json.loads(merged.stdout)["errors"][0]["path"] == str(missing)
