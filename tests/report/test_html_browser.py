"""The HTML report in a real browser: headless Chromium (Debian's, driven by Playwright). No console
errors, one heatmap cell per pair with its status, the filter and the search change what is shown, a
blocked pair's path names its cutting op, the static content is there with JavaScript off, nothing is
fetched. Screenshots are kept under tests/artifacts/ (not committed).

Select with `-m browser`; .ci/run installs Chromium and sets GRADAUDIT_REQUIRE_BROWSER=1, so there a
missing browser fails instead of skipping."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gradaudit.batch import AuditFailure
from gradaudit.report import html

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problem = "playwright is not installed (pip install '.[test]')"
    if not os.path.exists(path):
        problem = f"no Chromium at {path} (apt-get install chromium)"
    if problem:
        if os.environ.get("GRADAUDIT_REQUIRE_BROWSER"):
            pytest.fail(problem)
        pytest.skip(problem)
    return path


@pytest.fixture(scope="module")
def browser():
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def report_file(tmp_path_factory, argmax_report, stop_report, numeric_report) -> Path:
    """One page: a broken classifier, a stop_gradient model, and a healthy MLP with numeric results."""
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(html.render_many([argmax_report, stop_report, numeric_report], "error",
                                     [AuditFailure("/models/broken", "/models/broken: cannot read")]),
                    encoding="utf-8")
    return path


class Page:
    """A page opened from the file, with what the browser said and asked for on the way."""

    def __init__(self, browser, path: Path, javascript: bool = True, scheme: str = "light"):
        self.context = browser.new_context(java_script_enabled=javascript, color_scheme=scheme,
                                           viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())

    def section(self, index: int):
        return self.page.locator(f"section#m{index}")

    def visible_sources(self, index: int) -> list[str]:
        rows = self.section(index).locator("tr.row")
        return [rows.nth(k).get_attribute("data-source") for k in range(rows.count()) if rows.nth(k).is_visible()]

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser, report_file):
    p = Page(browser, report_file)
    yield p
    p.close()


def test_no_console_error_and_nothing_fetched(page, report_file):
    page.page.locator("section#m1 td.cell[data-status=blocked]").first.click()
    page.section(0).locator("input[type=search]").fill("dense")
    assert page.errors == []
    assert page.requests == [report_file.as_uri()]


def test_one_cell_per_pair_with_its_status(page, argmax_report, stop_report, numeric_report):
    for index, report in enumerate([argmax_report, stop_report, numeric_report]):
        cells = page.section(index).locator("td.cell")
        shown = {}
        for k in range(cells.count()):
            cell = cells.nth(k)
            source = cell.locator("xpath=ancestor::tr[1]").get_attribute("data-source")
            shown[source, cell.get_attribute("data-output")] = cell.get_attribute("data-status")
        assert shown == {(e.source, e.output): e.status for e in report.flow}
        assert cells.count() == len(report.flow)


def test_status_filter_hides_rows_without_a_shown_status(page):
    stop = page.section(1)
    assert page.visible_sources(1) == ["x", "w1", "w2"]
    stop.locator("input[data-status=blocked]").uncheck()
    assert page.visible_sources(1) == ["w2"]  # x and w1 only reach y blocked
    assert stop.locator(".shown").inner_text() == "1 of 3 sources shown"
    stop.locator("input[data-status=blocked]").check()
    stop.locator("input[data-status=connected]").uncheck()
    assert page.visible_sources(1) == ["x", "w1"]


def test_search_keeps_matching_sources_and_their_groups(page):
    argmax = page.section(0)
    argmax.locator("input[type=search]").fill("KERNEL")
    assert page.visible_sources(0) == ["dense/kernel"]
    assert not argmax.locator('details.group[data-group="inputs"]').is_visible()
    argmax.locator("input[type=search]").fill("")
    assert page.visible_sources(0) == ["x", "dense/bias", "dense/kernel"]


def test_clicking_a_blocked_cell_names_its_cut_and_links_its_path(page):
    argmax = page.section(0)
    cell = argmax.locator('tr[data-source="x"] td.cell[data-output="cls"]')
    cell.click()
    detail = argmax.locator(".detail-box")
    assert "x → cls: blocked by ArgMax 'ArgMax' (zero-gradient)" in detail.inner_text()
    detail.locator("a").click()
    target = page.page.locator(f"#{cell.get_attribute('data-path')}")
    assert target.get_attribute("data-source") == "x" and target.get_attribute("data-output") == "cls"
    assert target.locator(".cut-op").inner_text() == "ArgMax 'ArgMax'"
    cut_node = target.locator("svg g.node.cut")
    assert cut_node.count() == 1 and cut_node.locator("text").first.text_content() == "ArgMax"
    assert target.locator("svg g.node").first.text_content().strip().startswith("x")


def test_static_content_without_javascript(browser, report_file):
    p = Page(browser, report_file, javascript=False)
    try:
        assert p.errors == []
        assert p.page.locator("section.model").count() == 3
        assert p.page.locator("#index tr[data-model]").count() == 3
        # every cell is there and its status readable; the controls need JavaScript, so they stay hidden
        assert p.page.locator("td.cell").count() == 6 + 3 + 5
        assert not p.page.locator("form.controls").first.is_visible()
        assert p.visible_sources(1) == ["x", "w1", "w2"]
        assert p.page.locator('td.cell[data-status="blocked"]').first.get_attribute("title").startswith("x → cls")
        path = p.page.locator('details.path[data-source="w1"][data-output="y"]')
        assert path.locator(".cut-op").inner_text() == "StopGradient 'StopGradient'"
        assert path.locator("svg").is_visible()
        assert p.page.locator('article.rule[data-code="GA103"]').is_visible()
        assert p.page.locator(".bars .bar").count() == 4
        ARTIFACTS.mkdir(exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / "html-report-nojs.png"), full_page=True)
    finally:
        p.close()


def test_dark_scheme_and_screenshots(browser, report_file):
    light, dark = Page(browser, report_file), Page(browser, report_file, scheme="dark")
    try:
        def background(p: Page) -> str:
            return p.page.evaluate("getComputedStyle(document.body).backgroundColor")

        assert background(light) == "rgb(255, 255, 255)" and background(dark) == "rgb(13, 17, 23)"
        ARTIFACTS.mkdir(exist_ok=True)
        for name, p in (("light", light), ("dark", dark)):
            shot = ARTIFACTS / f"html-report-{name}.png"
            p.page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        assert light.errors == dark.errors == []
    finally:
        light.close()
        dark.close()


def test_changes_since_a_baseline_as_a_section(browser, tmp_path, stop_report):
    import dataclasses

    from gradaudit.report.diff import compare

    before = dataclasses.replace(stop_report, flow=[dataclasses.replace(e, status="connected", blocked_by=())
                                                    for e in stop_report.flow], findings=[])
    path = tmp_path / "changes.html"
    path.write_text(html.page([stop_report], "error", (), compare([before], [stop_report], "base.json", "this run")))
    p = Page(browser, path)
    try:
        assert p.errors == []
        assert p.page.locator("#verdict").inner_text() == "fail"
        lost = p.page.locator("#changes tr.lost-pair")
        assert sorted(lost.nth(k).get_attribute("data-source") for k in range(lost.count())) == ["w1", "x"]
        assert "StopGradient" in lost.first.inner_text() and "lost its gradient" in lost.first.inner_text()
        new = p.page.locator("#changes li.finding-new")
        assert sorted(new.nth(k).inner_text().split(" ")[2] for k in range(new.count())) == ["GA106", "GA108"]
    finally:
        p.close()


def test_precision_tables_are_shown_and_coloured(browser, tmp_path, mlp_report):
    import dataclasses

    from gradaudit.model import OpRef, PrecisionResult

    def result(kind: str, name: str, scale: float | None, underflow: float = 0.0, overflow: float = 0.0):
        return PrecisionResult(kind, name, "float16", scale, 8, underflow, 0.0, overflow, 1.0, 1e-9,
                               loss_scale=2.0 ** 15 if kind == "gradient" else None, underflow_scaled=0.0,
                               one_scale=True if kind == "gradient" else None,
                               op=OpRef("Exp", "exp", "f") if kind == "activation" else None)

    report = dataclasses.replace(mlp_report, precision=[
        result("gradient", "dense_1/kernel", None, underflow=0.25), result("gradient", "dense_1/kernel", 100.0),
        result("activation", "Exp 'exp'", 100.0, overflow=0.5)])
    path = tmp_path / "precision.html"
    path.write_text(html.render(report))
    p = Page(browser, path, javascript=False)
    try:
        assert p.errors == []
        gradients = p.page.locator('table.precision[data-kind="gradient"]')
        assert gradients.is_visible()
        cells = gradients.locator('tr[data-name="dense_1/kernel"] td.q')
        assert [cells.nth(k).inner_text() for k in range(cells.count())] == [
            "zero 25% (0% zero at the loss scale)", "ok"]
        colours = [cells.nth(k).evaluate("e => getComputedStyle(e).backgroundColor") for k in range(2)]
        assert colours == ["rgb(255, 206, 203)", "rgb(198, 239, 207)"]  # --bad-bg, --ok-bg
        assert gradients.locator("tr.loss-scale td").first.inner_text() == "2**15"
        forward = p.page.locator('table.precision[data-kind="activation"] tr[data-name="Exp \'exp\'"] td.q')
        assert forward.inner_text() == "inf 50%"
    finally:
        p.close()
