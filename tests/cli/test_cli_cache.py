"""--cache DIR: a run whose model, options and installation are unchanged renders the stored reports, byte for
byte what the run that filled it wrote, with its exit code, and audits nothing; any change audits again; a
broken entry or folder is a miss or one warning, never an error."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gradaudit.batch
from gradaudit import cache as cache_module

from .cli_helpers import SAMPLES, run

FORMATS = ("json", "sarif", "junit", "markdown", "html")


def _copy(name: str, to: Path) -> Path:
    return Path(shutil.copytree(SAMPLES / name, to / name))


@pytest.fixture
def audits(monkeypatch) -> list[list[str]]:
    """The models each run audited (a spy on batch.audit_models, which the CLI calls for the models it did not
    find in the cache)."""
    calls: list[list[str]] = []
    real = gradaudit.batch.audit_models

    def spy(paths, *args, **kwargs):
        calls.append([os.path.basename(p) for p in paths])
        return real(paths, *args, **kwargs)

    monkeypatch.setattr(gradaudit.batch, "audit_models", spy)
    return calls


def _listing(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its bytes' hash, and its folders."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json"))


def _every_format(model: Path, out: Path, *args: str):
    """One run writing the text report to stdout and every other format to `out`."""
    out.mkdir()
    files = [a for fmt in FORMATS for a in (f"--{fmt}", str(out / f"report.{fmt}"))]
    return run(model, *args, *files)


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_hit_renders_every_format_as_the_run_that_filled_it_and_audits_nothing(tmp_path, _isolated, audits):
    model = _copy("classifier_argmax", tmp_path)
    args = ("--timeout", "0", "--cache", "cache")  # the whole audit, numeric checks and probes, in this process
    filled = _every_format(model, tmp_path / "filled", *args)
    hit = _every_format(model, tmp_path / "hit", *args)
    assert audits == [["classifier_argmax"]]  # the second run audited nothing
    assert filled.exit_code == hit.exit_code == 1
    assert "from cache" not in filled.stderr
    assert hit.stderr.startswith("gradaudit: report from cache cache (key ") and hit.stderr.count("\n") == 1
    assert hit.stdout == filled.stdout and "GA103" in hit.stdout
    for fmt in FORMATS:
        assert (tmp_path / "hit" / f"report.{fmt}").read_bytes() == (tmp_path / "filled" / f"report.{fmt}").read_bytes()
    doc = json.loads((tmp_path / "hit" / "report.json").read_text())
    assert doc["numeric"] and doc["stability"] and "cache" not in doc  # a full report, and nothing says cache
    github = run(model, *args, "--format", "github")
    assert github.stdout == run(model, "--timeout", "0", "--format", "github").stdout


def test_a_hit_works_when_nothing_could_be_audited(tmp_path, _isolated, monkeypatch):
    model = _copy("mlp", tmp_path)
    filled = run(model, "--static-only", "--cache", "cache", "--format", "json")

    def impossible(*_args, **_kwargs):
        raise AssertionError("a hit audits nothing, imports no TensorFlow and starts no child")

    for name in ("audit_models", "audit_model", "import_tensorflow_quietly"):
        monkeypatch.setattr(gradaudit.batch, name, impossible)
    monkeypatch.setattr("gradaudit.isolate.prestart", impossible)
    hit = run(model, "--static-only", "--cache", "cache", "--format", "json")
    assert (hit.exit_code, hit.stdout) == (filled.exit_code, filled.stdout) == (0, filled.stdout)


@pytest.mark.parametrize("change", ["variables", "seed", "source", "tensorflow"])
def test_any_change_audits_again(change, tmp_path, _isolated, audits, monkeypatch):
    model = _copy("classifier_argmax", tmp_path)
    source = Path(shutil.copytree(cache_module.SOURCE, tmp_path / "gradaudit",
                                  ignore=shutil.ignore_patterns("__pycache__")))
    monkeypatch.setattr(cache_module, "SOURCE", source)
    args = ["--static-only", "--cache", "cache", "--format", "json"]
    first = run(model, *args)
    assert "from cache" in run(model, *args).stderr and len(audits) == 1
    if change == "variables":
        data = next((model / "variables").glob("*.data-*"))
        raw = bytearray(data.read_bytes())
        raw[-1] ^= 1
        data.write_bytes(bytes(raw))
    elif change == "seed":
        args += ["--seed", "1"]
    elif change == "source":  # a developer's edit of gradaudit itself
        with open(source / "cli.py", "a") as f:
            f.write("\n")
    else:  # another TensorFlow installed, as its distribution's metadata says
        real = cache_module._installed
        monkeypatch.setattr(cache_module, "_installed", lambda name: "2.99.0" if name == "tensorflow" else real(name))
    again = run(model, *args)
    assert "from cache" not in again.stderr and len(audits) == 2
    assert again.stdout == first.stdout  # the static report does not read the changed bytes or the seed
    assert "from cache" in run(model, *args).stderr and len(audits) == 2  # stored again under the new key


def test_the_policy_is_applied_to_a_hit_as_to_a_fresh_report(tmp_path, _isolated, audits):
    model = _copy("classifier_argmax", tmp_path)
    run(model, "--static-only", "--cache", "cache")
    ignored = run(model, "--static-only", "--cache", "cache", "--ignore", "GA103", "--format", "json")
    assert "from cache" in ignored.stderr and len(audits) == 1  # --ignore is not in the key: it is not stale
    assert ignored.exit_code == 0 and json.loads(ignored.stdout)["findings"] == []
    assert ignored.stdout == run(model, "--static-only", "--ignore", "GA103", "--format", "json").stdout


@pytest.mark.parametrize("damage", [b"", b'{"schema_version": 1, "tool": {}', b"\x00\xff not json",
                                    b'{"cache": {"format": 1, "key": "0", "reports": [1]}, "tool": {}}',
                                    b'[1, 2, 3]'])
def test_a_corrupt_truncated_or_foreign_entry_is_a_miss_and_is_overwritten(damage, tmp_path, _isolated, audits):
    model = _copy("stop_gradient", tmp_path)
    args = ("--static-only", "--cache", "cache", "--format", "json")
    filled = run(model, *args)
    [entry] = _entries(_isolated / "cache")
    good = entry.read_bytes()
    entry.write_bytes(damage if damage else good[: len(good) // 2])
    again = run(model, *args)
    assert again.stderr == "" and len(audits) == 2  # re-audited, without a word or a traceback
    assert (again.exit_code, again.stdout) == (filled.exit_code, filled.stdout)
    assert json.loads(entry.read_bytes())["cache"]["key"] == json.loads(good)["cache"]["key"]  # overwritten
    assert "from cache" in run(model, *args).stderr and len(audits) == 2


def test_an_unwritable_cache_warns_once_and_changes_nothing_else(tmp_path, _isolated, audits):
    models = [_copy("classifier_argmax", tmp_path), _copy("mlp", tmp_path)]
    (_isolated / "afile").write_text("")
    plain = run(*models, "--static-only", "--format", "json")
    cached = run(*models, "--static-only", "--cache", "afile/cache", "--format", "json")
    assert (cached.exit_code, cached.stdout) == (plain.exit_code, plain.stdout) == (1, plain.stdout)
    [line] = cached.stderr.splitlines()
    assert line.startswith("gradaudit: warning: cannot write the cache afile/cache: ") and "not cached" in line


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_model_folder_is_never_written(tmp_path, _isolated):
    model = _copy("classifier_argmax", tmp_path)
    before = _listing(model)
    run(model, "--timeout", "0", "--cache", "cache")
    assert "from cache" in run(model, "--timeout", "0", "--cache", "cache").stderr
    inside = run(model, "--static-only", "--cache", model / "cache")
    assert "is inside the model" in inside.stderr and inside.exit_code == 1
    assert _listing(model) == before
    cache = _isolated / "cache"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"


def test_several_models_each_found_or_audited_in_order(tmp_path, _isolated, audits):
    clf, mlp, stop = (_copy(n, tmp_path) for n in ("classifier_argmax", "mlp", "stop_gradient"))
    run(clf, stop, "--static-only", "--cache", "cache")
    mixed = run(clf, mlp, stop, "--static-only", "--cache", "cache", "--format", "json")
    assert audits[-1] == ["mlp"]
    assert mixed.stderr == "gradaudit: reports of 2 of 3 models from cache cache\n"
    assert mixed.stdout == run(clf, mlp, stop, "--static-only", "--format", "json").stdout


def test_python_targets_are_not_cached_and_it_is_said_once(tmp_path, _isolated, audits):
    script = tmp_path / "fn.py"
    script.write_text("import tensorflow as tf\n\n"
                      "@tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name='x')])\n"
                      "def f(x):\n    return {'y': tf.sin(x)}\n")
    for _ in range(2):
        result = run(f"{script}:f", "--static-only", "--cache", "cache")
        assert result.exit_code == 0
        assert result.stderr == ("gradaudit: --cache: module:attr targets are not cached (the code they import "
                                 "cannot be hashed)\n")
    assert len(audits) == 2 and not (_isolated / "cache").exists()


def test_the_configuration_sets_it_relative_to_its_file_and_inside_its_folder(tmp_path, _isolated, audits):
    model = _copy("stop_gradient", tmp_path)
    (_isolated / "pyproject.toml").write_text('[tool.gradaudit]\ncache = ".gradaudit_cache"\nstatic-only = true\n')
    (_isolated / "sub").mkdir()
    os.chdir(_isolated / "sub")
    run(model)
    assert f"from cache {_isolated / '.gradaudit_cache'} " in run(model).stderr and len(audits) == 1
    assert _entries(_isolated / ".gradaudit_cache")
    (_isolated / "pyproject.toml").write_text(f'[tool.gradaudit]\ncache = "{tmp_path / "elsewhere"}"\n')
    outside = run(model)
    assert outside.exit_code == 2 and "outside the project" in outside.stderr


@pytest.mark.slow
def test_a_default_run_then_a_hit_without_tensorflow(tmp_path):
    """The default audit (the model runs in the confined child) fills the cache; the hit, in a process where
    TensorFlow cannot be imported, writes the same reports with the same exit code."""
    model = _copy("where_nan", tmp_path)
    package_root = str(Path(gradaudit.batch.__file__).parents[1])  # the gradaudit under test, from any folder
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])}

    def command(*prefix: str, out: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, *prefix, str(model), "--cache", "cache", "--format", "sarif", "--json", out]
        return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)

    filled = command("-m", "gradaudit", out="filled.json")
    blocked = ("-c", "import sys; sys.modules['tensorflow'] = sys.modules['keras'] = None; "
                     "from gradaudit.cli import main; main()")
    hit = command(*blocked, out="hit.json")
    assert filled.returncode == hit.returncode == 1, filled.stderr
    assert filled.stderr == "" and hit.stderr.startswith("gradaudit: report from cache cache (key ")
    assert hit.stdout == filled.stdout
    assert (tmp_path / "hit.json").read_bytes() == (tmp_path / "filled.json").read_bytes()
    assert json.loads(filled.stdout)["runs"][0]["tool"]["driver"]["properties"]["tensorflow"] != "unknown"


@pytest.mark.slow
def test_a_run_stopped_by_its_timeout_is_not_stored(tmp_path):
    from helpers import save_slow_model

    model = save_slow_model(str(tmp_path / "slow"))
    result = run(model, "--timeout", "3", "--cache", tmp_path / "cache", "--format", "json")
    assert json.loads(result.stdout)["verdict"] == "incomplete"
    assert not list((tmp_path / "cache").glob("*.json"))
