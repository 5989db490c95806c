"""Nothing the process that runs a model writes is code to gradaudit (isolate.py, wire.py): a model allowed
to run anything (--allow-unsafe-ops) that writes framed pickles and forged results to every descriptor it
can open gets nothing run in the parent and no forged verdict; the child holds no descriptor of the
parent's but its socket, no secret of the environment, and dies with the parent, whose folder is removed
even after a SIGKILL."""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.isolate import ChildFailed, Stopped, child_environment, run_isolated

pytestmark = pytest.mark.slow  # child processes


class _Run:
    """A pickle that runs a shell command when it is loaded."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def hostile_payload(canary: str) -> bytes:
    """What an attacker writes on every descriptor: a multiprocessing frame (big-endian length, pickle), a
    pickle alone, and a forged result frame in gradaudit's own format saying the model passed."""
    pickled = pickle.dumps(_Run(f"id > {canary}"))
    forged = json.dumps({"kind": "ok", "data": {"report": {"target": {"path": "forged", "kind": "saved_model",
                                                                      "signature": None}}}}).encode()
    return (struct.pack("!i", len(pickled)) + pickled + pickled + struct.pack("!I", len(forged)) + forged)


def fd_sprayer(path: str, canary: str) -> str:
    """A model whose forward pass writes the payload to /proc/self/fd/0..63, each write inside a dataset whose
    errors are ignored, so that one descriptor that cannot be opened does not stop the others."""
    payload = hostile_payload(canary)

    class Sprayer(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            def spray(n):
                name = tf.strings.join(["/proc/self/fd/", tf.strings.as_string(n)])
                with tf.control_dependencies([tf.io.write_file(name, payload)]):
                    return tf.identity(n)

            done = tf.data.Dataset.range(64).map(spray).ignore_errors().reduce(tf.constant(0, tf.int64),
                                                                              lambda a, b: a + 1)
            with tf.control_dependencies([done]):
                return {"y": x * self.w}

    return save_module(Sprayer(), path)


def test_a_model_writing_pickles_on_every_descriptor_runs_nothing_in_the_parent(tmp_path):
    canary = tmp_path / "canary"
    path = fd_sprayer(str(tmp_path / "sprayer"), str(canary))
    out = tmp_path / "r.json"
    result = subprocess.run([sys.executable, "-m", "gradaudit", path, "--allow-unsafe-ops", "--json", str(out),
                             "--format", "json"], capture_output=True, text=True, timeout=600)
    assert not canary.exists(), result.stderr  # nothing was unpickled anywhere
    doc = json.loads(result.stdout)  # the report stream is the parent's alone
    assert doc["target"]["path"] == path  # not the forged report
    assert doc["isolation"]["time_budget_s"] == 600
    assert result.returncode == 1 and doc["verdict"] == "fail"  # GA401 WriteFile, as allowed, in the child
    assert any(f["code"] == "GA401" and f["op_type"] == "WriteFile" for f in doc["findings"])
    assert "Traceback" not in result.stderr


# The child's descriptors and what each is (the folder listdir opens is closed again before readlink).
_FDS = ("(lambda os: {n: os.readlink('/proc/self/fd/' + n) for n in os.listdir('/proc/self/fd') "
        "if os.path.exists('/proc/self/fd/' + n)})(__import__('os'))")


def test_the_child_holds_only_its_socket_and_the_null_device(tmp_path):
    fds, _ = run_isolated(eval, (_FDS,), 120.0, ())
    targets = sorted(fds.values())
    sockets = [t for t in targets if t.startswith("socket:")]
    assert len(sockets) == 1, targets
    assert not [t for t in targets if t.startswith("pipe:")], targets  # no pipe of the parent's, no stdin
    for n in ("0", "1", "2"):
        assert fds[n] == "/dev/null"


def test_the_channel_cannot_be_opened_by_path():
    fds, _ = run_isolated(eval, (_FDS,), 120.0, ())
    (fd,) = [n for n, target in fds.items() if target.startswith("socket:")]
    with pytest.raises(Stopped) as stopped:
        run_isolated(eval, (f"open('/proc/self/fd/{fd}', 'wb')",), 120.0, ())
    assert isinstance(stopped.value.reason, ChildFailed) and "No such device" in str(stopped.value)


def test_the_child_environment_holds_no_secrets(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("TF_NUM_INTEROP_THREADS", "1")
    env, _ = run_isolated(eval, ("dict(__import__('os').environ)",), 120.0, ())
    assert "GITHUB_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["TF_NUM_INTEROP_THREADS"] == "1"
    # Terraform's tokens and variables share TensorFlow's TF_ prefix (the tester's leak through StringToNumber)
    assert child_environment({"PATH": "/bin", "NPM_TOKEN": "x", "LC_ALL": "C", "TF_TOKEN_app_terraform_io": "t",
                              "TF_VAR_db_password": "p", "TF_CLI_CONFIG_FILE": "c", "TF_NUM_INTRAOP_THREADS": "2",
                              "PYTHON_KEYRING_BACKEND": "k"}) == {
        "PATH": "/bin", "LC_ALL": "C", "TF_NUM_INTRAOP_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "3",
        "GRPC_VERBOSITY": "ERROR"}


def test_a_result_that_is_not_data_is_refused():
    with pytest.raises(Stopped) as stopped:
        run_isolated(eval, ("object()",), 120.0, ())
    assert "not JSON serializable" in str(stopped.value)


def _descendants(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    pairs = [(int(a), int(b)) for a, b in zip(out[::2], out[1::2])]
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in pairs if parent in frontier} - found
        found |= frontier
    return found


def test_sigkill_of_gradaudit_leaves_no_process_and_no_folder(tmp_path, samples):
    from helpers import save_slow_model

    path = save_slow_model(str(tmp_path / "slow"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    run = subprocess.Popen([sys.executable, "-m", "gradaudit", path], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while len(_descendants(run.pid)) < 3 and time.monotonic() < deadline:  # reaper, child, model's process
        time.sleep(0.5)
    children = _descendants(run.pid)
    reaper = [p for p in children if "-I" in open(f"/proc/{p}/cmdline").read().split("\0")]
    assert len(children) >= 3, children
    assert [p.name for p in tmp.iterdir() if p.name.startswith("gradaudit-")]
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 60
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = {p for p in children if os.path.exists(f"/proc/{p}") and
                 "Z" not in open(f"/proc/{p}/stat").read().split(")")[-1].split()[0]}
    assert not alive and reaper
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("gradaudit-")]


def test_relative_paths_reach_the_child(samples, tmp_path, monkeypatch):
    """The child runs in another folder: the model and --inputs given relative to the working folder are
    handed to it as absolute paths (the README's own command is relative)."""
    import numpy as np
    from click.testing import CliRunner

    from gradaudit.cli import main

    monkeypatch.chdir(samples)
    np.savez(tmp_path / "x.npz", x=np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8))
    inputs = os.path.relpath(tmp_path / "x.npz", samples)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["mlp", "--inputs", inputs, "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["numeric"] and all(n["status"] == "pass" for n in doc["numeric"] if n["scale"] is None)
    assert doc["isolation"]["time_budget_s"] == 600
