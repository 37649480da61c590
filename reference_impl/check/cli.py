"""``python -m reference_impl.check pkg.mod:fn --model gemma3_text``: the check as a command.

Prints the table (every case, or the failing ones with ``--failures``) and the diagnosis; exits 0 when every
case passes, 1 when a case fails, 2 on a usage error (a function that cannot be imported, an unknown model).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys


def load_callable(spec: str):
    """``"pkg.mod:name"`` (or ``"pkg.mod:Class"`` of an ``nn.Module`` taking no arguments, or
    ``"path/to/file.py:name"``) -> the object. Errors name what is missing."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"expected 'module:function' (e.g. mykernels.norms:rms_norm), got {spec!r}")
    mod_name, _, attr = spec.rpartition(":")
    if mod_name.endswith(".py"):
        from pathlib import Path

        path = Path(mod_name)
        if not path.exists():
            raise ValueError(f"no file {mod_name!r}")
        s = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(s)
        sys.modules.setdefault(path.stem, mod)
        s.loader.exec_module(mod)
    else:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise ValueError(f"cannot import {mod_name!r}: {exc}") from exc
    obj = mod
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{mod_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    import torch

    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    if not callable(obj):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a function or module")
    return obj


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m reference_impl.check",
                                 description="Check a norm function or module against a model's norm, bit for bit "
                                             "and against the float64 oracle.")
    ap.add_argument("impl", nargs="?", help="the function to check, as module:function or file.py:function")
    ap.add_argument("--describe", metavar="NAME", help="print what the census knows about a model type, family, norm "
                                                       "class or released checkpoint (org/name), then exit")
    ap.add_argument("--list", action="store_true", help="list every model type and released checkpoint, then exit")
    ap.add_argument("--model", help="a transformers model type (gemma3_text, qwen3, ...) or family name")
    ap.add_argument("--convention", help="a catalog entry (rms_norm.gemma) or casting order, instead of or over --model")
    ap.add_argument("--eps", type=float, help="eps to use instead of the model's")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32", help="x dtypes, comma-separated (default: %(default)s)")
    ap.add_argument("--weight-dtypes", help="gain dtypes, comma-separated, or x (the gain in x's dtype) "
                                            "(default: x's half dtype and fp32)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    ap.add_argument("--widths", help="row widths of the probes, comma-separated (default: the kit's)")
    ap.add_argument("--scales", help="scales of x, comma-separated (default: the kit's)")
    ap.add_argument("--no-grads", action="store_true", help="skip the gradient checks")
    ap.add_argument("--no-bits", action="store_true", help="require only the float64 bound, not bit-identity")
    ap.add_argument("--norm", help="one norm of the model, by class (Qwen3NextRMSNormGated) or role (q, k, value, "
                                   "latent, inner_output, final); a gated norm is called as fn(x, weight, gate, eps)")
    ap.add_argument("--batch-invariant", action="store_true",
                    help="also require the same bits for a row (and its gradient) whatever its batch: size, position, "
                         "padding; and for repeated calls")
    ap.add_argument("--residual", action="store_true", help="the function is a fused add + norm: fn(x, residual, weight, eps)")
    ap.add_argument("--failures", action="store_true", help="print only the failing cases")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--diagnose", action="store_true", help="only name the convention the function equals")
    return ap


def _sizes(args) -> dict:
    """--eps, --widths and --scales checked before any work: a ValueError names the option and what it takes."""
    import math

    if args.eps is not None and not (math.isfinite(args.eps) and args.eps >= 0):
        raise ValueError(f"--eps must be a finite number >= 0, got {args.eps!r}")
    out = {}
    for name, conv, ok, what in (("widths", int, lambda v: v >= 1, "positive integers"),
                                 ("scales", float, lambda v: math.isfinite(v) and v > 0, "finite positive numbers")):
        text = getattr(args, name)
        if text is None:
            continue
        try:
            vals = tuple(conv(v) for v in text.split(",") if v.strip())
        except ValueError:
            vals = ()
        if not vals or not all(ok(v) for v in vals):
            raise ValueError(f"--{name} takes {what}, comma-separated; got {text!r}")
        out[name] = vals
    return out


def main(argv=None) -> int:
    from .kit import check_norm, diagnose

    ap = parser()
    args = ap.parse_args(argv)
    if args.describe is not None or args.list:
        from . import describe

        try:
            return describe.main(args)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.impl is None:
        ap.error("the function to check (module:function) is required unless --describe or --list is given")
    try:
        extra = _sizes(args)
        fn = load_callable(args.impl)
        dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
        wd = None if args.weight_dtypes is None else [d.strip() for d in args.weight_dtypes.split(",") if d.strip()]
        if args.diagnose:
            m = diagnose(fn, args.model, convention=args.convention, eps=args.eps, dtypes=dtypes, weight_dtypes=wd,
                         residual=args.residual, device=args.device, norm=args.norm)
            print(m.description)
            return 0
        report = check_norm(fn, args.model, convention=args.convention, eps=args.eps, dtypes=dtypes,
                            weight_dtypes=wd, device=args.device, grads=not args.no_grads, bits=not args.no_bits,
                            residual=args.residual, batch_invariant=args.batch_invariant, norm=args.norm,
                            raise_on_failure=False,
                            **extra)
    except (ValueError, TypeError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # the user's module or function called sys.exit
        print(f"error: {args.impl} called sys.exit({exc.code!r}) outside a case the kit could record", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.text(only_failures=args.failures))
    return 0 if report.ok else 1
