"""The CPU benchmark's results travel one way: measure, then analyse, then render.

- The analysis imports no rendering (its output is numbers and labels); the rendering reads the analysis.
- The committed run's Markdown tables are what the rendering draws from that run's own analysis.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "reference_impl" / "studies" / "bench"


def _imports(name: str) -> set[str]:
    tree = ast.parse((BENCH / f"{name}.py").read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module}


def test_the_analysis_imports_no_rendering_and_the_rendering_reads_the_analysis():
    assert "render" not in _imports("analyse")
    assert "render" not in _imports("limits") and "analyse" not in _imports("limits")
    assert "analyse" in _imports("render")


def test_the_committed_tables_are_drawn_from_the_committed_analysis():
    from reference_impl.studies.bench.analyse import index_results
    from reference_impl.studies.bench.render import tables

    data = json.loads((REPO / "docs" / "data" / "bench_cpu.json").read_text())
    allocs = [a for a, s in data["allocators"].items() if s["available"]]
    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    drawn = tables(index_results(data["results"]), data["comparisons"], data["targets"], allocs, shapes,
                   data["settings"]["dtypes"])
    # the fixed cost per call and its share of each step, drawn again from the committed records
    from reference_impl.studies.bench import overhead

    oh = data["call_overhead"]
    shares = overhead.fixed_shares(oh, index_results(data["results"]), oh["allocator"], shapes,
                                   data["settings"]["dtypes"])
    assert json.loads(json.dumps(shares)) == data["fixed_shares"]
    drawn["call_overhead"], drawn["fixed_shares"] = overhead.table(oh), overhead.share_table(shares)
    kept = {k: v for k, v in data["tables"].items() if k not in ("first_touch", "ort_support")}
    assert json.loads(json.dumps(drawn)) == kept
