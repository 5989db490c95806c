"""docs/rules.md is generated from the rule catalog and kept current; every rule has its documented sections."""

from __future__ import annotations

import os

from click.testing import CliRunner

from gradaudit.cli import main
from gradaudit.rules import ALL_RULES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rules_page_is_current():
    result = CliRunner().invoke(main, ["rules", "--markdown"])
    assert result.exit_code == 0
    with open(os.path.join(ROOT, "docs", "rules.md"), encoding="utf-8") as f:
        assert f.read() == result.output, "docs/rules.md is stale: gradaudit rules --markdown > docs/rules.md"
    for r in ALL_RULES:
        assert f"### {r.code} {r.slug}" in result.output
