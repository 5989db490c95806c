"""One audit reads the model once: gradaudit parses saved_model.pb once (the static pass, whose result the
child that runs the model receives) and TensorFlow's loader reads it once in that child; the child does not
parse it or analyse it again. Counted with strace over the whole process tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")]


def _opens(trace: str, path: str) -> list[str]:
    with open(trace) as f:
        return [line for line in f if f'"{path}"' in line and "openat(" in line and "= -1" not in line]


@pytest.mark.parametrize("flags", [[], ["--all-signatures"]])
def test_the_graph_is_parsed_once_and_loaded_once_per_signature(samples, tmp_path, flags):
    model = os.path.join(samples, "mlp")
    trace = str(tmp_path / "trace")
    result = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace, sys.executable, "-m",
                             "gradaudit", model, "--format", "json", *flags], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"status": "pass"' in result.stdout  # the numeric checks ran, in the child
    audited = len(json.loads(result.stdout).get("reports", [None]))
    assert audited == (2 if flags else 1)
    opens = _opens(trace, os.path.join(model, "saved_model.pb"))
    pids = {line.split()[0] for line in opens}
    # the parent's one parse, and the TensorFlow loader of the child that runs each signature
    assert len(opens) == 1 + audited and len(pids) == 1 + audited, opens
