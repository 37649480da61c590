"""The "Check your implementation" page's example, run for real: ``python -m reference_impl.studies.check_example``.

Writes ``docs/data/check_example.json``: :func:`reference_impl.check.check_norm` on a user's RMSNorm in the
Gemma 3 order and on two subtly wrong variants of it (rounding before the gain; eps outside the root),
against ``gemma3_text``. For each: the verdict, the table the kit prints for the failing cases, the
diagnosis, and the catalog entry it equals (or the closest one). Then each of the kit's features on one
more function (``features``: the diagnosis by experiment, bits within the bound, batch invariance,
gradients that do not reach the weight, a forward-only check, one gated norm of a model by its role) and
the command's answers to bad input
(``usage``). Deterministic (fixed seeds), a few seconds.
"""
from __future__ import annotations

import sys

from ..provenance import REPO, finish, python_closure, record, write_json
from . import check_example_norms as N
from .check_example_norms import eps_outside, gemma_rms_norm, rounds_before_gain

OUT = REPO / "docs" / "data" / "check_example.json"
COMMAND = "python -m reference_impl.studies.check_example"
SOURCES = python_closure("reference_impl/studies/check_example.py", "reference_impl/studies/check_example_norms.py",
                         "reference_impl/check/kit.py", "reference_impl/check/cli.py",
                         "reference_impl/check/diagnosis.py", "reference_impl/check/consistency.py")
MODEL = "gemma3_text"
DTYPES = ("bf16", "fp32")




FUNCTIONS = {"gemma_rms_norm": gemma_rms_norm, "rounds_before_gain": rounds_before_gain, "eps_outside": eps_outside}


def run_one(fn) -> dict:
    """One check, as the page shows it: verdict, failing rows' table, diagnosis, what it equals."""
    from ..check import check_norm
    from ..check.report import table

    rep = check_norm(fn, MODEL, dtypes=DTYPES, raise_on_failure=False)
    failed = rep.failures
    return {
        "ok": rep.ok, "cases": len(rep.results), "failed": len(failed),
        "verdict": rep.summary().splitlines()[-1],
        "table": table(failed) if failed else "",
        "diagnosis": rep.diagnosis,
        "matched": rep.match.matched if rep.match else None,
        "closest": rep.match.closest if rep.match else None,
        "closest_max_ulp": (rep.match.max_ulp.get(rep.match.closest) if rep.match and rep.match.closest else None),
        "worst_err_ulp": max((r.err_ulp for r in rep.results if r.err_ulp is not None), default=None),
        "worst_fraction_different": max((r.fraction_different for r in rep.results
                                         if r.fraction_different is not None), default=None),
        "max_ulp_vs_module": max((r.max_ulp for r in rep.results if r.max_ulp is not None), default=None),
        "failed_by_dtype": {dn: sum(1 for r in failed if r.dtype == dn) for dn in DTYPES},
        # the scales of the small probes (a wide probe scales each of its rows on its own)
        "failing_scales_by_dtype": {dn: sorted({r.scale for r in failed if r.dtype == dn and r.layout != "wide"})
                                    for dn in DTYPES},
        "worst_err_scale": max((r for r in rep.results if r.err_ulp is not None and r.layout != "wide"),
                               key=lambda r: r.err_ulp).scale,
        "failed_wide": sum(1 for r in failed if r.layout == "wide"),
        "coverage": next((n for n in rep.notes if n.startswith("covered: ")), ""),
        "closest_equal_in": [dn for dn, names in (rep.match.by_dtype.items() if rep.match else ())
                             if rep.match.closest in names],
        "truth": rep.truth,
        "facts_from": rep.target.source,
    }


CLI_ARGS = ["reference_impl.studies.check_example_norms:rounds_before_gain", "--model", MODEL, "--dtypes", ",".join(DTYPES),
            "--failures"]


def run_cli() -> tuple[int, str]:
    """The command's exit status and everything it prints (run in this process, stdout captured)."""
    import contextlib
    import io

    from ..check.cli import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli_main(CLI_ARGS)
    return rc, buf.getvalue()


# each of the kit's features on a function of check_example_norms.py: (function, model, check_norm options)
FEATURES = {
    "sum_in_half": (N.sum_in_half, "qwen3", {"dtypes": ("bf16",)}),
    "blocked_sum": (N.blocked_sum, "qwen3", {"dtypes": ("fp32",)}),
    "blocked_sum_no_bits": (N.blocked_sum, "qwen3", {"dtypes": ("fp32",), "bits": False}),
    "split_by_batch": (N.split_by_batch, "qwen3", {"dtypes": ("fp32",), "batch_invariant": True}),
    "detached_weight": (N.detached_weight, "qwen3", {"dtypes": ("bf16",)}),
    "detached_weight_forward_only": (N.detached_weight, "qwen3", {"dtypes": ("bf16",), "grads": False}),
    "gated_norm": (N.gated_norm, "qwen3_next", {"dtypes": ("bf16",), "norm": "inner output"}),
}
# the command's answers to bad input: one line on stderr, exit status 2
USAGE = (["--eps", "inf"], ["--device", "banana"], ["--dtypes", ""], ["--model", "gemma99"])


def run_feature(fn, model, opts) -> dict:
    from ..check import check_norm

    rep = check_norm(fn, model, raise_on_failure=False, **opts)
    return {"function": fn.__name__, "model": model,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in opts.items()},
            "ok": rep.ok, "cases": len(rep.results), "failed": len(rep.failures),
            "verdict": rep.summary().splitlines()[-1], "diagnosis": rep.diagnosis,
            "findings": [f.key for f in rep.findings],
            "notes": [n for n in rep.notes if not n.startswith("covered: ")],  # the coverage line aside
            "first_failure": rep.failures[0].problem or "" if rep.failures else ""}


def run_usage(args) -> dict:
    import contextlib
    import io

    from ..check.cli import main as cli_main

    err = io.StringIO()
    full = ["reference_impl.studies.check_example_norms:gemma_rms_norm"] + \
        (args if "--model" in args else ["--model", MODEL] + args)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli_main(full)
    return {"command": "python -m reference_impl.check " + " ".join(a if a else '""' for a in full),
            "exit_status": rc, "stderr": err.getvalue().rstrip("\n")}


def compute() -> dict:
    rc, out = run_cli()
    return {"model": MODEL, "dtypes": list(DTYPES),
            "command": "python -m reference_impl.check " + " ".join(CLI_ARGS), "cli_exit_status": rc,
            "cli_output": out.rstrip("\n"),
            "runs": {name: run_one(fn) for name, fn in FUNCTIONS.items()},
            "features": {name: run_feature(*spec) for name, spec in FEATURES.items()},
            "usage": [run_usage(a) for a in USAGE]}


def main(argv=None) -> int:
    prov = record(COMMAND, SOURCES, packages=("torch", "numpy", "transformers"))
    data = {"provenance": prov, **compute()}
    finish(prov)
    write_json(OUT, data)
    runs = data["runs"]
    print(f"wrote {OUT}: " + ", ".join(f"{k} {'ok' if v['ok'] else 'FAIL'}" for k, v in runs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
