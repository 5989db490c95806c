"""The rules' reference page (docs/rules.md), generated from the catalog so that it never drifts from it."""

from __future__ import annotations

from . import ALL_RULES

FAMILIES = (("GA1", "Gradient flow (static)"), ("GA2", "Numeric checks"), ("GA3", "Numerical hazards and probes"),
            ("GA4", "Safety"))
# what a family's severities do beyond each rule's default, said once above its rules
INTROS = {"GA3": "A hazard (GA301 to GA306) is found from the graph alone, at its default severity (warning). The "
                 "stability probes then judge it: a hazard whose op they see make a gradient NaN or Inf becomes an "
                 "**error** that says where (`confirmed_by`), and the probe's own GA310 or GA311 on that op, which "
                 "carries the scales, the sources and the outputs, is **info**: one cause is one error; a hazard "
                 "they reach without seeing it fail becomes **info** (`probed`); `--static-only` keeps the warning."}


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
        out += ["", f"## {title}"] + (["", INTROS[prefix]] if prefix in INTROS else [])
        for r in rules:
            out += ["", f"### {r.code} {r.slug}", "", f"Default severity: **{r.severity.value}**. {r.summary}", "",
                    _headings_down(r.doc), "", f"**Fix:** {r.fix}"]
    return "\n".join(out) + "\n"
