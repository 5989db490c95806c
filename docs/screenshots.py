"""Rebuild the README's screenshots of the HTML report: a healthy model (mlp) and a broken one
(classifier_argmax), fully audited (numeric checks and probes included), shot in headless Chromium.

    python docs/screenshots.py            # writes docs/report-healthy.png, docs/report-broken.png
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    from playwright.sync_api import sync_playwright

    from gradaudit.api import AuditOptions, audit_saved_model
    from gradaudit.report import html

    shots = {"healthy": "mlp", "broken": "classifier_argmax"}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=ARGS)
        for name, model in shots.items():
            report = audit_saved_model(str(REPO / "sample_models" / model), AuditOptions())
            # paths as a reader of the repository sees them, not this machine's
            report.target = type(report.target)(f"sample_models/{model}", report.target.kind,
                                                report.target.signature, report.target.tags)
            page_file = Path(tmp) / f"{name}.html"
            page_file.write_text(html.render(report), encoding="utf-8")
            page = browser.new_page(viewport={"width": 1200, "height": 1000}, device_scale_factor=1)
            page.goto(page_file.as_uri())
            if name == "broken":  # show what a click on a blocked cell says
                page.locator('tr[data-source="x"] td.cell[data-output="cls"]').click()
            page.screenshot(path=str(HERE / f"report-{name}.png"), full_page=True)
            page.close()
            print(f"docs/report-{name}.png", file=sys.stderr)
        browser.close()


if __name__ == "__main__":
    main()
