"""The GA2xx rules: stable codes, the slugs the issue names, documented like every rule."""

from gradaudit.rules import DOC_SECTIONS, get_rule, numeric


def test_numeric_rules_have_codes_slugs_and_doc_sections():
    slugs = {r.slug: r.code for r in numeric.RULES}
    assert slugs == {"gradient-mismatch": "GA201", "nondeterministic": "GA202", "surrogate-gradient": "GA203",
                     "missing-gradient": "GA204", "unrunnable-model": "GA205", "float32-gradient": "GA206"}
    for rule in numeric.RULES:
        assert all(f"## {section}" in rule.doc for section in DOC_SECTIONS), rule.code
        assert get_rule(rule.code) is rule and get_rule(rule.slug) is rule
