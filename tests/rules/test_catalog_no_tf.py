"""`gradaudit rules` and `gradaudit explain` stay instant: the rule catalog imports no TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
from click.testing import CliRunner
from gradaudit.cli import main
for args in (["rules"], ["explain", "GA109"], ["explain", "gradient-raises"]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip()
print("tensorflow" in sys.modules, "keras" in sys.modules)
"""


@pytest.mark.slow
def test_rules_and_explain_import_no_tensorflow():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
