"""``python -m reference_impl.studies.census``: every norm class and placement of the installed transformers.

Writes ``docs/data/census.json`` (schema: ``reference_impl/studies/schemas/census.schema.json``) and
``reference_impl/check/census_index.json`` (the kit's ``model=`` look-up). Options: ``--classes N`` and
``--models N`` limit the run to the first N of each (a smoke run, marked ``quick``), ``--out`` writes
elsewhere.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .run import DATA_FILE, INDEX_FILE, run_census, write


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reference_impl.studies.census", description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=int, default=None, help="probe only the first N norm classes")
    ap.add_argument("--models", type=int, default=None, help="trace only the first N model types")
    ap.add_argument("--out", type=Path, default=DATA_FILE, help="where to write census.json")
    ap.add_argument("--index", type=Path, default=INDEX_FILE, help="where to write census_index.json")
    args = ap.parse_args(argv)
    if args.classes is not None and args.classes < 0 or args.models is not None and args.models < 0:
        ap.error("--classes and --models take a count >= 0")
    t0 = time.monotonic()
    data = run_census(max_classes=args.classes, max_models=args.models, progress=sys.stderr)
    write(data, args.out, args.index)
    c = data["counts"]
    print(f"census: {c['classes']} classes ({c['in_scope']} in scope, {c['matched']} matched, {c['unmatched']} "
          f"unmatched, {c['out_of_scope']} out of scope); {c['model_types']} model types ({c['traced']} traced, "
          f"{c['failed']} failed); {time.monotonic() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
