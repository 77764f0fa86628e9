"""Report pages in a real browser: Debian's chromium (/usr/bin/chromium) driven by playwright, nothing downloaded.

Each page is opened from a file with every request that is not the page
itself blocked and recorded (none may leave), every console message and page
error collected (none may be an error: a refused inline script, a CSP
violation, a script that threw), every dialog recorded (an injected
``alert``).  The pages carry hostile data whose payloads would set
``window.__pwned`` or open a dialog if they ran.  Then the page is used:
clicking a stage shows its table, choosing a hit shows its path, the query
picker switches queries (and switching back draws what the HTML showed:
the script and Python draw alike); with JavaScript off the first query reads
whole.  A trace of 1,000 queries x 10 stages x 1,000 candidates opens within
2 s.  Each test saves a screenshot under ``test-output/``.

Skipped, with the reason, without playwright or without /usr/bin/chromium
(``apt-get install chromium``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

import irflow
from irflow.engine.recipe import load_recipe
from irflow.evaluation.evaluate import evaluate_runs
from irflow.util.html import Markup, page
from report_pages import cut, terminal_rows
from test_report_hostile import PAYLOADS, STORABLE

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
OUTPUT = Path(__file__).resolve().parent.parent / "test-output"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
if not Path(CHROMIUM).is_file():
    pytest.skip(f"no browser at {CHROMIUM}: install Debian's chromium (apt-get install chromium) to run these",
                allow_module_level=True)


class Watched:
    """One page in a fresh profile, every request, console message, page error and dialog recorded."""

    def __init__(self, playwright, *, javascript: bool = True) -> None:
        self.profile = tempfile.mkdtemp(prefix="irflow-chromium-")
        self.context = playwright.chromium.launch_persistent_context(
            self.profile, executable_path=CHROMIUM, headless=True, args=ARGS, java_script_enabled=javascript,
            viewport={"width": 1280, "height": 900}, offline=True)
        self.page = self.context.new_page()
        self.url = ""
        self.blocked: list[str] = []
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.context.route("**/*", self._route)
        self.page.on("console", lambda message: self.console.append((message.type, message.text)))
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", self._dialog)

    def _route(self, route) -> None:
        if route.request.url == self.url:
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: Path) -> float:
        """Load ``path``; the seconds until its load event (the page's own navigation timing)."""
        self.url = path.resolve().as_uri()
        self.page.goto(self.url, wait_until="load")
        return self.page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000.0

    def assert_clean(self) -> None:
        assert self.blocked == [], f"requests left the page: {self.blocked}"
        assert [m for m in self.console if m[0] in ("error", "warning")] == [], self.console
        assert self.errors == [] and self.dialogs == [], (self.errors, self.dialogs)
        if self.page.evaluate("() => window.__pwned !== undefined"):
            raise AssertionError(f"an injected script ran: window.__pwned = {self.page.evaluate('window.__pwned')}")

    def shot(self, name: str) -> None:
        OUTPUT.mkdir(exist_ok=True)
        self.page.screenshot(path=str(OUTPUT / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def playwright():
    with sync_api.sync_playwright() as running:
        yield running


@pytest.fixture
def browser(playwright):
    opened: list[Watched] = []

    def make(javascript: bool = True) -> Watched:
        opened.append(Watched(playwright, javascript=javascript))
        return opened[-1]

    yield make
    for watched in opened:
        watched.close()


@pytest.fixture(scope="module")
def hostile():
    records = []
    for i, payload in enumerate(STORABLE):
        records.append(irflow.Record(f"pkg{i}{payload}", "description", f"zip archive tool {payload}",
                                     {"owner": payload}))
        records.append(irflow.Record(f"pkg{i}{payload}", "name", f"archive {i} {payload}", {"owner": "x"}))
    corpus = irflow.build(records, name="corpus <script>window.__pwned=10</script>")
    queries = ["zip " + PAYLOADS[0], "archive " + PAYLOADS[2], "tool " + PAYLOADS[6]]
    return corpus, queries, load_recipe("search").run(corpus, queries, mode="hybrid", k=4, trace=True)


def _stage(watched: Watched, name: str) -> int:
    return watched.page.evaluate("(name) => JSON.parse(document.getElementById('irflow-data').textContent)"
                                 ".stages.findIndex(s => s.name === name)", name)


def _rows(watched: Watched, selector: str) -> list[list[str]]:
    return watched.page.eval_on_selector_all(
        f"{selector} tbody tr", "rows => rows.map(r => Array.from(r.children).map(c => c.textContent))")


def _as_terminal(rows: list[list[str]]) -> list[list[str]]:
    """A page's candidate rows as the terminal prints them: rank, score, artifact, surface, record (cut to 32)."""
    return [[r[0], r[1], cut(r[3], 32), cut(r[4], 32), cut(r[5], 32)] for r in rows]


def test_a_trace_page_loads_clean_and_works(browser, hostile, tmp_path):
    corpus, queries, result = hostile
    path = tmp_path / "trace.html"
    result.trace.to_html(path)
    watched = browser()
    watched.open(path)
    watched.assert_clean()
    page = watched.page
    before = {s: page.inner_text(s) for s in ("#summary", "#stages", "#paths", "#bump")}
    # the final stage's table is shown; clicking another stage in the DAG shows its table instead
    collapse, dense = _stage(watched, "collapse"), _stage(watched, "dense")
    assert page.is_visible(f"#stage-{collapse}") and not page.is_visible(f"#stage-{dense}")
    page.click(f"svg.dag .node[data-i='{dense}']")
    assert page.is_visible(f"#stage-{dense} table") and not page.is_visible(f"#stage-{collapse}")
    _, terminal = terminal_rows(result.trace.stage("dense").table(0, limit=50))
    assert _as_terminal(_rows(watched, f"#stage-{dense}")) == [row[:5] for row in terminal]
    # choosing a hit (a row of a table) shows its path
    page.click(f"svg.dag .node[data-i='{collapse}']")
    page.click(f"#stage-{collapse} tbody tr:nth-child(2)")
    opened = page.eval_on_selector_all("#path-list details[open]", "nodes => nodes.map(n => n.dataset.rec)")
    chosen = page.get_attribute(f"#stage-{collapse} tbody tr:nth-child(2)", "data-rec")
    assert opened == [chosen] and page.is_visible("#path-list details[open] table")
    steps = page.eval_on_selector_all("#path-list details[open] tbody tr:not(.detail)",
                                      "rows => rows.map(r => r.children[0].textContent)")
    assert steps == list(result.trace.stages)
    watched.shot("trace-path")
    # the picker switches queries: query 1's tables are the terminal's
    page.select_option("#query-picker", "1")
    page.click(f"svg.dag .node[data-i='{collapse}']")
    _, terminal = terminal_rows(result.trace.stage("collapse").table(1, limit=50))
    assert _as_terminal(_rows(watched, f"#stage-{collapse}")) == [row[:5] for row in terminal]
    _, summary = terminal_rows(result.trace.summary_table(1))
    assert _rows(watched, "#summary") == summary
    watched.shot("trace-query-1")
    # and back: the script draws query 0 as the HTML did
    page.select_option("#query-picker", "0")
    for section, text in before.items():
        if section != "#stages":
            assert page.inner_text(section) == text, section
    watched.assert_clean()


def test_a_page_reads_without_javascript(browser, hostile, tmp_path):
    _, _, result = hostile
    path = tmp_path / "trace.html"
    result.trace.to_html(path)
    watched = browser(javascript=False)
    watched.open(path)
    page = watched.page
    assert page.is_visible("p.nojs-only")
    assert page.eval_on_selector_all(".stage", "nodes => nodes.filter(n => n.offsetParent !== null).length") == \
        len(result.trace)  # every stage's section, not tabs
    assert page.is_visible("#path-list details[open] table")
    watched.shot("trace-no-javascript")
    watched.assert_clean()


def test_the_other_pages_load_clean(browser, hostile, tmp_path):
    corpus, queries, result = hostile
    other = load_recipe("search").run(corpus, queries, mode="lexical", k=4, trace=True).trace
    pages = {"diff": result.trace.diff_html(other), "result": load_recipe("hybrid").run(corpus, queries, k=3).to_html()}
    qrels = {f"q{i}{p}": {f"d{p}": 1} for i, p in enumerate(STORABLE[:4])}
    runs = {label: {q: {f"d{p}": 1.0, f"x{p}": 2.0 * (label == PAYLOADS[0])} for q, p in zip(qrels, STORABLE)}
            for label in (PAYLOADS[0], PAYLOADS[2])}
    pages["eval"] = evaluate_runs(runs, qrels, metrics="ndcg@10,p@1", baseline=PAYLOADS[0]).to_html()
    watched = browser()
    for name, html in pages.items():
        path = tmp_path / f"{name}.html"
        path.write_text(html, encoding="utf-8")
        watched.open(path)
        watched.assert_clean()
        if name == "diff":
            first = watched.page.inner_text("#diff-body")
            watched.page.select_option("#query-picker", "1")
            assert watched.page.inner_text("#diff-body") != first
            watched.page.select_option("#query-picker", "0")
            assert watched.page.inner_text("#diff-body") == first
        watched.shot(f"{name}-page")
    watched.assert_clean()


def test_the_watch_catches_a_payload_that_was_not_escaped(browser, tmp_path):
    # the checks above can fail: the same payloads written raw (no escaping) are caught, by the page's policy
    # (an inline script or handler refused, the image "x" not requested: console errors) or by what they did
    raw = Markup('<p><img src=x onerror="window.__pwned=3"></p><script>window.__pwned=1</script>')
    for body, caught in ((raw, "Content Security Policy"), (Markup("<p id=\"p\">x</p>"), None)):
        path = tmp_path / "raw.html"
        path.write_text(page("raw", body, style="", script="document.title = 'ran';"), encoding="utf-8")
        watched = browser()
        watched.open(path)
        if caught is None:
            watched.assert_clean()
            assert watched.page.title() == "ran"  # the page's own nonce'd script runs
            continue
        with pytest.raises(AssertionError, match=caught):
            watched.assert_clean()
        assert watched.page.evaluate("() => window.__pwned === undefined")  # the policy stopped both
        assert any("Content Security Policy" in text for _, text in watched.console)
    # without the policy, the escaping is all there is: the raw payload runs, and the watch says so
    path.write_text(f"<!DOCTYPE html><html><body>{raw}</body></html>", encoding="utf-8")
    watched = browser()
    watched.open(path)
    with pytest.raises(AssertionError, match="an injected script ran|requests left the page"):
        watched.assert_clean()
    watched.shot("raw-payload-caught")


@pytest.mark.slow
def test_a_large_trace_gives_a_bounded_page_that_works(browser, tmp_path):
    # how long writing and opening take is measured by benchmarks/report.py (figures in the docs'
    # performance page), not asserted here: a shared CI machine's clock says more about its neighbours
    sys.path.insert(0, str(Path(__file__).parent))
    from report_scale import big_trace

    trace = big_trace(queries=1000, stages=10, candidates=1000)
    path = tmp_path / "big.html"
    trace.to_html(path)
    size = path.stat().st_size
    assert size < 12 << 20, f"{size} bytes"
    watched = browser()
    watched.open(path)
    watched.assert_clean()
    assert "showing the top 50 of 1,000 candidates" in watched.page.inner_text("#stages")
    assert "queries 0\u201399 of 1,000" in watched.page.inner_text("nav")
    watched.page.select_option("#query-picker", "99")
    watched.assert_clean()
    watched.shot("large-trace")
