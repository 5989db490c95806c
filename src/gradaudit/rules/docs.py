"""The rules' reference page (docs/rules.md), generated from the catalog so that it never drifts from it."""

from __future__ import annotations

from . import ALL_RULES

FAMILIES = (("GA1", "Gradient flow (static)"), ("GA2", "Numeric checks"), ("GA3", "Numerical hazards and probes"),
            ("GA4", "Safety"))


def _headings_down(doc: str) -> str:
    """The docstring's `## Section` headings one level below the rule's own heading."""
    return "\n".join("#" + line if line.startswith("## ") else line for line in doc.splitlines()[1:]).strip()


def markdown() -> str:
    out = ["# Rules", "",
           "Generated from gradaudit's rule catalog (`gradaudit rules --markdown`); `gradaudit explain CODE` prints "
           "one rule.", "", "| code | slug | severity | summary |", "|---|---|---|---|"]
    out += [f"| [{r.code}](#{r.code.lower()}-{r.slug}) | `{r.slug}` | {r.severity.value} | {r.summary} |"
            for r in ALL_RULES]
    for prefix, title in FAMILIES:
        rules = [r for r in ALL_RULES if r.code.startswith(prefix)]
        if not rules:
            continue
        out += ["", f"## {title}"]
        for r in rules:
            out += ["", f"### {r.code} {r.slug}", "", f"Default severity: **{r.severity.value}**. {r.summary}", "",
                    _headings_down(r.doc), "", f"**Fix:** {r.fix}"]
    return "\n".join(out) + "\n"
