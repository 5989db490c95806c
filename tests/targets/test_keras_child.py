"""A Keras file is built from its configuration by Keras, which runs code and allocates what the
configuration declares: with a --timeout (the command line's default) it is loaded, traced and audited in the
confined child, --static-only included, so a configuration that declares a huge layer is stopped there at the
memory limit, and a healthy file gets the same verdict as in-process, with the isolation in force."""

from __future__ import annotations

import json
import zipfile

import keras
import pytest
from click.testing import CliRunner

from gradaudit.cli import main

pytestmark = pytest.mark.slow  # child processes


def _argmax_file(path: str) -> str:
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,), name="x")
    probs = keras.layers.Dense(3, activation="softmax", name="dense")(inp)
    cls = keras.ops.cast(keras.ops.argmax(probs, axis=-1), "float32")
    keras.Model(inp, {"probs": probs, "cls": cls}).save(path)
    return path


def test_a_keras_file_is_audited_in_the_child_with_the_same_verdict(tmp_path):
    path = _argmax_file(str(tmp_path / "argmax.keras"))
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [path, "--json", str(out)])
    doc = json.loads(out.read_text())
    assert result.exit_code == 1, result.output
    assert doc["target"]["kind"] == "keras" and doc["verdict"] == "fail"
    assert any(f["rule"] == "zero-gradient" and f["op_type"] == "ArgMax" for f in doc["findings"])
    assert doc["isolation"]["time_budget_s"] == 600 and doc["isolation"]["memory_limit_bytes"] > 0
    in_process = tmp_path / "in.json"
    CliRunner().invoke(main, [path, "--json", str(in_process), "--timeout", "0"])
    same = json.loads(in_process.read_text())
    assert [f["code"] for f in same["findings"]] == [f["code"] for f in doc["findings"]]
    def flow(d):  # traced function names carry a per-process counter
        return [(e["source"], e["output"], e["status"], [c["op_type"] for c in e.get("blocked_by", ())])
                for e in d["flow"]]

    assert flow(same) == flow(doc) and same["verdict"] == doc["verdict"]


def test_a_configuration_declaring_a_huge_layer_is_stopped_in_the_child(tmp_path):
    """12 GB of weights declared in a file of a few KB: Keras allocates them while it builds the model."""
    small = _argmax_file(str(tmp_path / "small.keras"))
    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(small) as src, zipfile.ZipFile(bomb, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                text = json.dumps(config).replace('"units": 3', '"units": 30000')
                text = text.replace("[null, 4]", "[null, 100000]")
                data = text.encode()
            dst.writestr(item, data)
    result = CliRunner().invoke(main, [str(bomb), "--static-only", "--memory-limit", "2G", "--format", "json"])
    assert result.exit_code in (1, 2), result.output
    if result.exit_code == 1:  # stopped in the child: incomplete, with the reason
        doc = json.loads(result.stdout)
        assert doc["verdict"] == "incomplete"
        assert any("Keras file did not finish" in line for line in doc["incomplete"]), doc["incomplete"]
    else:  # refused before allocating, in one line
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
