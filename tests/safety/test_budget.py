"""Budgets before anything runs: special or huge files are refused at once (exit 2), count attributes are
checked before layouts are built, an --inputs archive that decompresses to gigabytes is not loaded."""

from __future__ import annotations

import io
import os
import resource
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from numpy.lib import format as npy

from gradaudit.cli import main

from .hostile import small_saved_model

pytestmark = pytest.mark.slow  # memory-limited child processes


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> str:
    return small_saved_model(str(tmp_path_factory.mktemp("budget") / "small"))


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a regression fails instead of eating the machine


def _cli(*args: str) -> subprocess.CompletedProcess:
    """gradaudit in a child process with a memory limit and a time limit (a FIFO would block forever)."""
    return subprocess.run([sys.executable, "-m", "gradaudit", *args], check=False, capture_output=True, text=True,
                          timeout=300, preexec_fn=_limited, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def _copy(small: str, tmp_path, name: str) -> str:
    path = str(tmp_path / name)
    shutil.copytree(small, path)
    return path


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_special_graph_file_is_refused(small, tmp_path, kind):
    path = _copy(small, tmp_path, kind)
    pb = os.path.join(path, "saved_model.pb")
    os.remove(pb)
    if kind == "dev_zero":
        os.symlink("/dev/zero", pb)
    else:
        os.mkfifo(pb)
    done = _cli(path, "--static-only")
    assert done.returncode == 2 and "not a regular file" in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1


def test_huge_count_attribute_is_refused_before_layouts(small, tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    path = _copy(small, tmp_path, "unpack")
    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    unpack = [n for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def if n.op == "Unpack"]
    unpack[0].attr["num"].i = 300_000_000
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    done = _cli(path, "--static-only")
    assert done.returncode == 2 and "num = 300000000" in done.stderr, done.stderr[-2000:]


def _npy_header_only(shape, dtype=np.float32) -> bytes:
    buf = io.BytesIO()
    npy.write_array_header_1_0(buf, {"descr": npy.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                      "shape": shape})
    return buf.getvalue() + b"\0" * 16


def test_inputs_that_decompress_to_gigabytes_are_refused(small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", _npy_header_only((1_000_000_000,)))  # 4 GB announced, a few bytes stored
    result = CliRunner().invoke(main, [small, "--inputs", str(bomb)])
    assert result.exit_code == 2 and "MiB of arrays" in result.output
    fine = tmp_path / "fine.npz"
    np.savez(fine, x=np.ones([3], np.float32))
    result = CliRunner().invoke(main, [small, "--inputs", str(fine), "--format", "json"])
    assert result.exit_code in (0, 1) and '"numeric"' in result.stdout
