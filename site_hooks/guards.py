"""Which tests guard which ids, and how they did on the last run.

The test files are scanned statically (AST) for ``@pytest.mark.guards("id", ...)``, so a page that names
an id no test guards, or a test that does not exist, fails the build even before any test ran. Outcomes
come from ``build/test-results.json``, written by phase 1 of ``make test``; without it the page says "not run
yet". Site tests (``@pytest.mark.site``) run in phase 2, after the build, so no build can show their outcome:
the page says they "run after the build", with the outcome of the previous phase 2
(``build/test-results-site.json``) when there is one.
"""
from __future__ import annotations

import ast
import html
import json
import re
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

from .macros import MacroError, macro
from .wording import plural

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "build" / "test-results.json"
SITE_RESULTS = REPO / "build" / "test-results-site.json"
_SITE_TESTS: set[str] = set()  # filled by scan_tests: test ids carrying the ``site`` marker


def clear_caches() -> None:
    """Forget scanned tests and loaded results (called before every build, so ``mkdocs serve`` stays fresh)."""
    scan_tests.cache_clear()
    results.cache_clear()
    site_results.cache_clear()


def _guard_args(dec) -> list[str] | None:
    """Ids of every ``pytest.mark.guards("a", "b")`` call inside a decorator or ``pytestmark`` expression,
    including ``pytest.param(..., marks=pytest.mark.guards(...))`` inside a parametrize list."""
    ids = []
    for node in ast.walk(dec):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "guards":
            ids += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            for a in node.args:  # guards(*catalog_guards()): the ids the norm catalog derives
                if (isinstance(a, ast.Starred) and isinstance(a.value, ast.Call)
                        and getattr(a.value.func, "id", getattr(a.value.func, "attr", "")) == "catalog_guards"):
                    from reference_impl.norms import catalog_guards

                    ids += catalog_guards()
    return ids or None


def _has_site_mark(dec) -> bool:
    """True when a decorator or ``pytestmark`` expression contains ``pytest.mark.site``."""
    return any(isinstance(n, ast.Attribute) and n.attr == "site" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(dec))


@lru_cache(maxsize=1)
def scan_tests() -> tuple[dict, set]:
    """Returns ({guard id: [test function id]}, {every test function id}); records the site tests too."""
    by_id: dict[str, list[str]] = defaultdict(list)
    all_tests: set[str] = set()
    _SITE_TESTS.clear()
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        module_guards: list[str] = []
        module_site = False
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                vals = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for v in vals:
                    module_guards += _guard_args(v) or []
                    module_site = module_site or _has_site_mark(v)

        def visit(body, prefix, inherited, site):
            for node in body:
                if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                    cls = list(inherited)
                    for dec in node.decorator_list:
                        cls += _guard_args(dec) or []
                    visit(node.body, f"{prefix}{node.name}::", cls,
                          site or any(_has_site_mark(d) for d in node.decorator_list))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                    tid = f"{rel}::{prefix}{node.name}"
                    all_tests.add(tid)
                    if site or any(_has_site_mark(d) for d in node.decorator_list):
                        _SITE_TESTS.add(tid)
                    ids = list(inherited)
                    for dec in node.decorator_list:
                        ids += _guard_args(dec) or []
                    for gid in ids:
                        by_id[gid].append(tid)

        visit(tree.body, "", module_guards, module_site)
    return dict(by_id), all_tests


@lru_cache(maxsize=1)
def results() -> dict:
    if RESULTS.exists():
        return json.loads(RESULTS.read_text())
    return {}


@lru_cache(maxsize=1)
def site_results() -> dict:
    """The previous phase 2's outcomes (site tests), or {} when there was none or its file is unreadable."""
    try:
        return json.loads(SITE_RESULTS.read_text()) if SITE_RESULTS.exists() else {}
    except (OSError, ValueError):
        return {}


def is_site_test(test_id: str) -> bool:
    """True when the test function carries ``@pytest.mark.site`` (directly, on its class or its module)."""
    scan_tests()
    return test_id in _SITE_TESTS


def _counts(tests: dict, test_id: str) -> tuple[dict, float]:
    counts: dict[str, int] = defaultdict(int)
    duration = 0.0
    for nodeid, entry in tests.items():
        if nodeid == test_id or nodeid.startswith(test_id + "["):
            counts[entry["outcome"]] += 1
            duration += float(entry.get("duration", 0.0))
    return counts, duration


def test_exists(test_id: str) -> bool:
    """True when ``tests/...py::[Class::]test_name`` names a test function in the repository."""
    return test_id in scan_tests()[1]


def outcome(test_id: str) -> dict:
    """Aggregates the outcomes of every parametrization of one test function.

    Returns ``{"status", "text", "duration"}``; status is ``failed`` if any parametrization failed or
    passed unexpectedly (xpassed), else ``not-run`` if any was collected but not run, else ``passed`` if
    any passed, else ``skipped`` (all skipped or xfailed); ``not-run`` too when the file has no entry.
    A site test, which runs after the build, has status ``after-build``; its text gives the previous phase
    2's outcome when one was recorded.
    """
    counts, duration = _counts(results().get("tests", {}), test_id)
    if not counts and is_site_test(test_id):
        prev, _ = _counts(site_results().get("tests", {}), test_id)
        text = "runs after the build"
        if prev:
            when = str(site_results().get("date", ""))[:10]
            text += f" (previous run{' ' + when if when else ''}: " + \
                ", ".join(f"{n} {k}" for k, n in sorted(prev.items())) + ")"
        return {"status": "after-build", "text": text, "duration": 0.0}
    if not counts:
        return {"status": "not-run", "text": "not run yet", "duration": 0.0}
    if counts.get("failed") or counts.get("xpassed"):
        status = "failed"
    elif counts.get("not run"):
        status = "not-run"
    elif counts.get("passed"):
        status = "passed"
    else:
        status = "skipped"
    text = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return {"status": status, "text": text, "duration": duration}


def guard_status(gid: str) -> str:
    """'passed', 'failed', 'skipped' or 'not-run' for one guard id, over all the tests naming it."""
    by_id, _ = scan_tests()
    states = {outcome(t)["status"] for t in by_id.get(gid, [])}
    for s in ("failed", "not-run", "skipped"):
        if s in states:
            return s
    return "passed" if states else "not-run"


def test_anchor(test_id: str) -> str:
    """The id of a test's entry in the evidence list at the bottom of a page."""
    return "t-" + re.sub(r"[^A-Za-z0-9]+", "-", test_id.removeprefix("tests/")).strip("-").lower()


SYMBOL = {"passed": "\u2713", "failed": "\u2717", "skipped": "\u25cb", "not-run": "\u25cb", "after-build": "\u25cb"}
def css_class(status: str) -> str:
    """The CSS class of an outcome; one that runs after the build is styled like one not run yet."""
    return "guard-not-run guard-after-build" if status == "after-build" else f"guard-{status}"


# How the collapsed lists count each status ("36 passed; 2 run after the build"): status, singular, plural.
COUNT_WORDS = (("passed", "passed", "passed"), ("failed", "failed", "failed"), ("skipped", "skipped", "skipped"),
               ("after-build", "runs after the build", "run after the build"),
               ("not-run", "not run yet", "not run yet"))


def render_tests(test_ids: list[str], anchors: bool = False) -> str:
    """A list of tests with their last outcome; ``anchors`` gives each item the id badges link to."""
    items = []
    for t in test_ids:
        o = outcome(t)
        took = f' title="{o["duration"]:.2f} s"' if o["duration"] else ""
        anchor = f' id="{test_anchor(t)}"' if anchors else ""
        items.append(f'<li{anchor}><code>{html.escape(t)}</code> <span class="{css_class(o["status"])}"{took}>'
                     f'{html.escape(o["text"])}</span></li>')
    return "<ul>" + "".join(items) + "</ul>"


def combined_status(test_ids: list[str]) -> str:
    """failed > not run > skipped > passed; site tests that run after the build count as passed next to
    tests that passed (the text still says they run after the build), and alone give ``after-build``."""
    states = {outcome(t)["status"] for t in test_ids}
    for s in ("failed", "not-run", "skipped"):
        if s in states:
            return s
    if "passed" in states:
        return "passed"
    return "after-build" if states else "not-run"


def summary_text(test_ids: list[str]) -> str:
    """'checked by 38 tests: 36 passed; 2 run after the build' with the combined outcome's symbol, for a
    collapsed list; 'checked by 3 tests: all passed' when every test passed."""
    status = combined_status(test_ids)
    n = len(test_ids)
    what = f"checked by {n} test{'s' if n != 1 else ''}"
    counts: dict[str, int] = defaultdict(int)
    for t in test_ids:
        counts[outcome(t)["status"]] += 1
    if n and counts.get("passed") == n:
        what += ": all passed" if n > 1 else ": passed"
    elif n:
        what += ": " + "; ".join(f"{counts[s]} {one if counts[s] == 1 else many}"
                                 for s, one, many in COUNT_WORDS if counts.get(s))
    return f'<span class="{css_class(status)}">{SYMBOL[status]}</span> {what}'


def badge_text(test_ids: list[str]) -> str:
    """The one word under a formula: its combined outcome ("tested"), the details one click away."""
    status = combined_status(test_ids)
    word = {"passed": "tested", "failed": "a test failed", "skipped": "tests skipped here",
            "not-run": "tests not run in this build",
            "after-build": "tested after the build"}.get(status, status)
    return f'<span class="{css_class(status)}">{SYMBOL[status]}</span> {word}'


def run_info() -> str:
    r = results()
    if not r:
        return "No test run recorded in this build (run <code>make test</code>)."
    m = r.get("machine", {})
    cores = plural(m["cores"], "core") if isinstance(m.get("cores"), int) else "? cores"
    text = (f"Outcomes from the test run of {html.escape(r.get('date', '?'))} at commit "
            f"<code>{html.escape(r.get('commit', '?'))}</code> on {html.escape(str(m.get('cpu', '?')))} "
            f"({cores}, torch {html.escape(str(m.get('torch', '?')))})")
    partial = r.get("partial_runs") or []
    if partial:
        text += (f", updated by {len(partial)} partial run{'s' if len(partial) > 1 else ''} "
                 f"(last {html.escape(str(partial[-1].get('date', '?')))})")
    return text + "."


@macro("guards")
def guards_macro(ctx, *gids: str) -> str:
    """A collapsed "checked by" block listing the tests that guard the ids; fails the build when an id has
    no test."""
    by_id, _ = scan_tests()
    tests: list[str] = []
    for gid in gids:
        if gid not in by_id:
            raise MacroError(f"{ctx.src_path}: no test is marked @pytest.mark.guards({gid!r})")
        ctx.guard_ids.append(gid)
        tests += [t for t in by_id[gid] if t not in tests]
    ids = ", ".join(f"<code>{html.escape(g)}</code>" for g in gids)
    return (f'<details class="evidence guard-list" markdown="0"><summary>{summary_text(tests)}</summary>'
            f'<div class="evidence-ids">Guarded ids: {ids}</div>{render_tests(tests)}</details>')


@macro("test")
def test_macro(ctx, test_id: str) -> str:
    """A compact badge for one test function, linking to its entry in the page's evidence list (the full
    test id and its last outcome are in the badge's tooltip); fails the build if the test does not exist."""
    _, all_tests = scan_tests()
    if test_id not in all_tests:
        raise MacroError(f"{ctx.src_path}: test {test_id!r} does not exist")
    ctx.guard_ids.append("test:" + test_id)
    o = outcome(test_id)
    label = {"passed": "\u2713 tested", "failed": "\u2717 test failed", "skipped": "\u25cb skipped",
             "not-run": "\u25cb not run", "after-build": "\u25cb runs after the build"}[o["status"]]
    title = html.escape(f"{test_id}: {o['text']}", quote=True)
    return (f'<a class="badge {css_class(o["status"])}" href="#{test_anchor(test_id)}" title="{title}" '
            f'data-test="{html.escape(test_id, quote=True)}">{label}</a>')


def page_footer(ctx) -> str:
    """The evidence list at the bottom of the page: every test its formulas, badges and blocks name, in one
    collapsed block under the heading "Tests behind this page" (anchor ``guards-on-this-page``)."""
    if not ctx.guard_ids:
        return ""
    by_id, _ = scan_tests()
    tests: list[str] = []
    for gid in ctx.guard_ids:
        for t in ([gid[5:]] if gid.startswith("test:") else by_id.get(gid, [])):
            if t not in tests:
                tests.append(t)
    return ("\n\n## Tests behind this page {#guards-on-this-page}\n\n"
            f'<details class="page-evidence" markdown="0"><summary>{summary_text(tests)}</summary>'
            f"<p>{run_info()}</p>{render_tests(tests, anchors=True)}</details>\n")
