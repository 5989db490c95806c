"""The confinement of the process that runs a model (safety/sandbox.py), tried from inside a confined Python
process without TensorFlow: what it may read and write, the network it may not reach, the memory it may not
take, and the sizes --memory-limit accepts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from gradaudit.safety.sandbox import parse_memory_limit

# Runs in a fresh interpreter: confine, then try each access; prints what succeeded.
PROBE = r"""
import json, os, socket, subprocess, sys
from gradaudit.safety.sandbox import confine

model, tmp, outside, port = sys.argv[1:5]
sys.path.insert(0, os.getcwd())  # as `python -m gradaudit` run from the outside folder puts it
isolation = confine((model,), tmp, 256 << 20)
result = {"isolation": [isolation.filesystem, isolation.network, isolation.memory_limit_bytes],
          "file_size_limit": isolation.file_size_limit_bytes}

def attempt(name, action):
    try:
        action()
        result[name] = "ok"
    except OSError as exc:
        result[name] = exc.__class__.__name__

def write(path):
    with open(path, "w") as f:
        f.write("x")

def read(path):
    with open(path) as f:
        f.read()

def connect():
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5):
        pass

def write_past(path, offset):
    with open(path, "wb") as f:
        f.seek(offset)  # a sparse file: no disk is used
        f.write(b"x")

attempt("write_tmp", lambda: write(os.path.join(tmp, "ok.txt")))
attempt("write_past_cap", lambda: write_past(os.path.join(tmp, "big"), isolation.file_size_limit_bytes))
attempt("write_outside", lambda: write(os.path.join(outside, "canary.txt")))
attempt("write_model", lambda: write(os.path.join(model, "canary.txt")))
attempt("read_model", lambda: read(os.path.join(model, "saved_model.pb")))
attempt("read_secret", lambda: read(os.path.join(outside, "secret.txt")))
attempt("list_outside", lambda: os.listdir(outside))
attempt("connect", connect)
attempt("execute", lambda: subprocess.run(["/bin/true"], check=True))
try:
    bytearray(512 << 20)
    result["allocate"] = "ok"
except MemoryError:
    result["allocate"] = "MemoryError"
print(json.dumps(result))
"""


def _landlock_abi() -> int:
    import landlockpy

    return landlockpy.abi_version()


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """What a confined process could do, tried once: a model folder, its temporary folder, an outside folder
    with a secret (the working folder, on sys.path), and a TCP server of this process on the loopback."""
    if not sys.platform.startswith("linux") or _landlock_abi() < 4:
        pytest.skip("Landlock with network rules (ABI 4) is not available here")
    root = tmp_path_factory.mktemp("sandbox")
    model, tmp, outside = root / "model", root / "tmp", root / "outside"
    for folder in (model, tmp, outside):
        folder.mkdir()
    (model / "saved_model.pb").write_bytes(b"model")
    (outside / "secret.txt").write_text("secret")
    server = socket.create_server(("127.0.0.1", 0))
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, str(model), str(tmp), str(outside),
                               str(server.getsockname()[1])], capture_output=True, text=True, timeout=120,
                              check=False, cwd=outside)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout), model, tmp, outside


@pytest.mark.slow  # a confined child process
def test_confined_process_writes_only_its_own_folder(probed):
    result, model, tmp, outside = probed
    assert result["write_tmp"] == "ok" and (tmp / "ok.txt").exists()
    assert result["write_outside"] == "PermissionError" and not (outside / "canary.txt").exists()
    assert result["write_model"] == "PermissionError" and not (model / "canary.txt").exists()


@pytest.mark.slow  # a confined child process
def test_confined_process_reads_the_model_and_nothing_outside(probed):
    result, *_ = probed
    assert result["read_model"] == "ok"
    assert result["read_secret"] == "PermissionError"
    assert result["list_outside"] == "PermissionError"


@pytest.mark.slow  # a confined child process
def test_confined_process_reaches_no_network_and_no_memory_past_its_limit(probed):
    result, *_ = probed
    filesystem, network, memory = result["isolation"]
    assert filesystem == f"landlock-abi{_landlock_abi()}" and network.startswith("landlock")
    assert result["connect"] != "ok"  # refused by Landlock, or no route in an empty network namespace
    assert result["execute"] == "PermissionError"  # no program may be executed
    assert memory == 256 << 20 and result["allocate"] == "MemoryError"


@pytest.mark.slow  # a confined child process
def test_confined_process_writes_no_file_past_twice_the_model(probed):
    result, *_ = probed
    assert result["file_size_limit"] == 2 * len(b"model") + (1 << 30)
    assert result["write_past_cap"] == "OSError"  # EFBIG, not a signal that kills the process


@pytest.mark.parametrize("text, expected", [("4G", 4 << 30), ("512MiB", 512 << 20), ("1.5g", 3 << 29),
                                            ("2GB", 2 << 30), ("1000", 1000), ("0", 0), ("none", 0)])
def test_memory_limit_sizes(text, expected):
    assert parse_memory_limit(text) == expected


@pytest.mark.parametrize("text", ["", "x", "-1", "4Q", "inf", "nan"])
def test_memory_limit_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="expected a size"):
        parse_memory_limit(text)
