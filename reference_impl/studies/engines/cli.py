"""The command line of the engines study."""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ...provenance import REPO, check_out, finish, python_closure, record, write_json
from .sources import CACHE, RELEASES

OUT = REPO / "docs" / "data" / "engines.json"
COMMAND = "python -m reference_impl.studies.engines"
SOURCES = python_closure(*(f"reference_impl/studies/engines/{n}.py" for n in (
    "study", "sources", "loader", "modelmap", "paths", "measure", "read")),
    "reference_impl/studies/conformance_liger.py")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description="What the engines compute: their released norm code, "
                                 "checked per model type with the kit; writes docs/data/engines.json")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cache", type=Path, default=CACHE, help="where releases are downloaded (ignored by git)")
    ap.add_argument("--offline", action="store_true", help="use only releases already in the cache")
    ap.add_argument("--only", nargs="*", choices=sorted(RELEASES), help="only these releases")
    ap.add_argument("--quick", action="store_true", help="one dtype, fewer checks (a smoke run); not for the site")
    ap.add_argument("--verify", action="store_true", help="re-run the rows of --out whose release is at hand here "
                    "(downloads nothing) and print what differs from the file, as JSON")
    ap.add_argument("--dtype", default="fp16", choices=("bf16", "fp16", "fp32"), help="with --verify: the x dtype")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.verify:
        from .verify import main as verify_main

        return verify_main(args.out, args.only, args.dtype)
    check_out(ap, args.out)
    from .study import measure_all

    prov = record(COMMAND, SOURCES, quick=args.quick or bool(args.only),
                  packages=("torch", "numpy", "transformers", "triton", "liger-kernel"))
    data = {"provenance": prov, **measure_all(args.quick, args.cache, not args.offline, args.only)}
    finish(prov)
    write_json(args.out, data)
    n = len(data["rows"])
    print(f"wrote {args.out}: {n} rows, {len(data['read'])} kernels read, {len(data['matrix'])} trainer x server pairs")
    return 0
