"""``python -m reference_impl.studies.census``: every norm class and placement of the installed transformers.

Writes ``docs/data/census.json`` (schema: ``reference_impl/studies/schemas/census.schema.json``) and
``reference_impl/check/census_index.json`` (the kit's ``model=`` look-up). Options: ``--classes N`` and
``--models N`` limit the run to the first N of each (a smoke run, marked ``quick``), ``--out`` writes
elsewhere (the index then goes next to it unless ``--index`` says where).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ... import provenance as pv
from ...provenance import check_out
from .checkpoints import DATA_FILE as CHECKPOINTS_FILE
from .checkpoints import TABLE, build
from .run import COMMAND, DATA_FILE, INDEX_FILE, index, run_census


def write(data: dict, out: Path = DATA_FILE, index_file: Path = INDEX_FILE) -> None:
    """Validate the census and write it with the kit's index (here, so that the census run imports no schema)."""
    from ..schemas import check_data

    check_data(data, "census.json", str(out))
    pv.write_json(out, data)
    pv.write_json(index_file, index(data), sort_keys=True)


def write_checkpoints(census: dict, out: Path, index_file: Path | None) -> dict:
    """Resolve the released checkpoints under ``census`` and write ``checkpoints.json`` (validated first)."""
    from ..schemas import check_data

    entries = ["reference_impl/studies/census/checkpoints.py"]
    # the census is no source file: the build checks every row against the committed census instead
    prov = pv.record(COMMAND + " --checkpoints-only", pv.python_closure(*entries) + [pv.relative(TABLE)])
    data = {"provenance": pv.finish(prov), **build(census)}
    check_data(data, "checkpoints.json", str(out))
    pv.write_json(out, data)
    if index_file is not None:   # the kit answers for a checkpoint id from its index
        pv.write_json(index_file, index(census, data), sort_keys=True)
    return data


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m reference_impl.studies.census", description=__doc__.splitlines()[0])
    ap.add_argument("--classes", type=int, default=None, help="probe only the first N norm classes")
    ap.add_argument("--models", type=int, default=None, help="trace only the first N model types")
    ap.add_argument("--out", type=Path, default=DATA_FILE, help="where to write census.json")
    ap.add_argument("--index", type=Path, default=None,
                    help="where to write census_index.json (default: the kit's, or --out's folder when --out is given)")
    ap.add_argument("--checkpoints-only", action="store_true",
                    help="only resolve reference_impl/checkpoints.yaml under the census file at --out")
    ap.add_argument("--checkpoints-out", type=Path, default=None,
                    help="where to write checkpoints.json (default: the site's, or --out's folder when --out is given)")
    args = ap.parse_args(argv)
    committed = args.out.resolve() == DATA_FILE.resolve()
    if args.index is None:  # a run written elsewhere leaves the kit's committed index alone too
        args.index = INDEX_FILE if committed else args.out.parent / INDEX_FILE.name
    if args.checkpoints_out is None:
        args.checkpoints_out = CHECKPOINTS_FILE if committed else args.out.parent / CHECKPOINTS_FILE.name
    if args.checkpoints_only:
        from ..schemas import check_file

        c = write_checkpoints(check_file(args.out), args.checkpoints_out, args.index)["counts"]
        print(f"checkpoints: {c['checkpoints']} over {c['model_types']} model types -> {args.checkpoints_out}")
        return 0
    if args.classes is not None and args.classes < 0 or args.models is not None and args.models < 0:
        ap.error("--classes and --models take a count >= 0")
    check_out(ap, args.out)
    check_out(ap, args.index, "--index")
    check_out(ap, args.checkpoints_out, "--checkpoints-out")
    t0 = time.monotonic()
    data = run_census(max_classes=args.classes, max_models=args.models, progress=sys.stderr)
    write(data, args.out, args.index)
    if args.classes is None and args.models is None:   # a full census: resolve the checkpoints under it
        write_checkpoints(data, args.checkpoints_out, args.index)
    c = data["counts"]
    print(f"census: {c['classes']} classes ({c['in_scope']} in scope, {c['matched']} matched, {c['unmatched']} "
          f"unmatched, {c['out_of_scope']} out of scope); {c['model_types']} model types ({c['traced']} traced, "
          f"{c['failed']} failed); {time.monotonic() - t0:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
