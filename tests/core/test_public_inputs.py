"""Every public callable of the package answers bad input with a clear TypeError/ValueError.

The callables are discovered, not listed: each public function and ``torch.autograd.Function`` defined in
``reference_impl`` and its subpackages (the catalog ``norms``, the native ``ops``, ``distributed``, ...) whose
first argument is the input tensor (``x``, ``q``, ``x_local``). Each is first called with good arguments
built from its parameter names; then with the standard bad inputs, one at a time: a 0-d ``x``, an int32
``x``, each gain or bias one element shorter than the row or on the ``meta`` device, eps -1 / NaN / Inf,
convention ``"banana"``. Each bad call must raise TypeError or ValueError whose message names the problem
(never a crash from deep inside torch, an out-of-bounds read, or a silent answer).

Left out, by package: ``studies`` and ``check`` (commands with their own argument parsing), ``symbolic``
(SymPy, no tensors), ``tiny_lm`` (the training study's model: its input is token ids), ``ops.rsqrt`` (the rsqrt study's elementwise op: no row, gain or eps), ``standalone`` (self-contained copies of each model family's code, which read
exactly as the model's modeling file does and import nothing of the package), ``oracle`` (NumPy float64
arrays) and ``tolerances`` (bounds computed from inputs the callers have checked). A callable that cannot
run here (a CUDA or Triton kernel on a machine without them) is skipped, and says why.
 No callable is exempt: the row kernels and convention steps the checked entry points call check
their inputs too.
"""
from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import reference_impl

D = 8
LEFT_OUT = {"studies", "check", "symbolic", "standalone", "oracle", "tolerances", "provenance", "rsqrt", "tiny_lm"}
FIRST = ("x", "q", "x_local")
VECTORS = {"weight", "w", "q_weight", "k_weight", "bias", "q_bias", "k_bias", "weight_local", "bias_local"}
MISSING = inspect.Parameter.empty

# arguments whose good value the parameter's name does not tell
OVERRIDES = {"reference_impl.norms.head_norms.per_head_gain_layer_norm": {"weight": torch.rand(2, D) + 0.5,
                                                                          "bias": torch.zeros(2, D)},
             "reference_impl.norms.prms_norm.PartialRMSNormFunction": {"k": D // 2},  # a count, not a key tensor
             "reference_impl.norms.prms_norm.partial_rms_norm": {"p": 0.5}}  # the default keeps 0 of 8 features
CONVENTIONS = ("reference", "llama", "neox")


def _modules():
    out = [reference_impl]
    for info in pkgutil.walk_packages(reference_impl.__path__, "reference_impl."):
        if set(info.name.split(".")[1:]) & LEFT_OUT:
            continue
        out.append(importlib.import_module(info.name))
    return out


def discover() -> dict[str, tuple]:
    """dotted name -> (callable, its parameters, whether it is an autograd Function's apply)."""
    found = {}
    for mod in _modules():
        for name, value in vars(mod).items():
            if name.startswith("_") or getattr(value, "__module__", None) != mod.__name__:
                continue
            if inspect.isclass(value) and issubclass(value, torch.autograd.Function):
                params, fn, applied = list(inspect.signature(value.forward).parameters.values())[1:], value.apply, True
            elif inspect.isfunction(value):
                params, fn, applied = list(inspect.signature(value).parameters.values()), value, False
            else:
                continue
            if params and params[0].name in FIRST:
                dotted = f"{mod.__name__}.{name}"
                found[dotted] = (fn, params, applied, dict(OVERRIDES.get(dotted, {})))
    return found


def discover_modules() -> dict[str, type]:
    """dotted name -> every public ``torch.nn.Module`` class of the walked modules."""
    return {f"{mod.__name__}.{name}": value for mod in _modules() for name, value in vars(mod).items()
            if not name.startswith("_") and inspect.isclass(value) and issubclass(value, torch.nn.Module)
            and value.__module__ == mod.__name__}


def good(name: str):
    """A good value for a parameter the callable requires, by its name (MISSING when the name is unknown)."""
    if name in ("x", "q", "k", "residual", "gate", "x_local"):
        return torch.randn(2, D, dtype=torch.float32)
    if name in VECTORS:
        return torch.rand(D) + 0.5
    if name == "rstd":  # one float32 statistic per row of the (2, D) x above
        return torch.rand(2, 1) + 0.5
    table = {"g": torch.tensor([2.0]), "eps": 1e-6, "d": D, "alpha": torch.tensor(0.5), "shift": torch.tensor(0.1),
             "convention": "reference", "placement": "inside", "gs": D // 2, "k": D // 2, "head_dim": D,
             "block_size": None, "res_fp32": False, "eps_placement": "inside"}
    return table.get(name, MISSING)


def call(entry, **bad):
    fn, params, applied, fixed = entry
    bad = {**fixed, **bad}
    if applied:  # Function.apply takes every argument positionally
        values = [bad[p.name] if p.name in bad else (p.default if p.default is not MISSING else good(p.name))
                  for p in params]
        if MISSING in values:
            raise LookupError(params[values.index(MISSING)].name)
        return fn(*values)
    kwargs = {}
    for p in params:
        if p.name in bad:
            kwargs[p.name] = bad[p.name]
        elif p.default is MISSING:
            kwargs[p.name] = good(p.name)
            if kwargs[p.name] is MISSING:
                raise LookupError(p.name)
    return fn(**kwargs)


def bad_inputs(params, fixed) -> dict[str, tuple[dict, tuple[str, ...]]]:
    """case -> (the bad argument, words one of which the error must contain)."""
    names = [p.name for p in params]
    first = names[0]
    cases = {"0-d x": ({first: torch.tensor(1.0)}, ("0-d", "dimension")),
             "int32 x": ({first: torch.randint(0, 3, (2, D), dtype=torch.int32)}, ("dtype", "int"))}
    for p in names:
        if p in VECTORS:
            base = fixed[p] if p in fixed else good(p)
            cases[f"short {p}"] = ({p: base[..., :-1].clone()}, (p, "shape", "size"))
            cases[f"{p} on meta"] = ({p: torch.ones_like(base, device="meta")}, ("meta", "device"))
    if "eps" in names:
        for e in (-1.0, math.nan, math.inf):
            cases[f"eps {e}"] = ({"eps": e}, ("eps",))
    if "convention" in names:
        cases["convention banana"] = ({"convention": "banana"}, ("banana", "convention"))
    return cases


CALLABLES = discover()


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    """The tensor- and sequence-parallel norms need a process group: one gloo rank, in this process."""
    made = not dist.is_initialized()
    if made:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    if made:
        dist.destroy_process_group()


def test_the_walk_finds_the_public_callables():
    """The discovery reaches every layer of the package; a broken discovery would pass every check below."""
    names = set(CALLABLES)
    for expected in ("reference_impl.rms_norm", "reference_impl.norms.rms_norm.RMSNormFunction",
                     "reference_impl.norms.gated_rms_norm.mamba2_gated_rms_norm", "reference_impl.ops.library.fused_rms_norm",
                     "reference_impl.ops.triton_norm.TritonRMSNormFunction", "reference_impl.distributed.sharded_rms_norm"):
        assert expected in names, expected
    assert len(names) >= 50, sorted(names)


class CannotRun(Exception):
    """The callable needs hardware this machine lacks (a CUDA device, or Triton without its interpreter)."""


def _with_convention(entry):
    """The entry with the first convention the callable takes, when it takes one."""
    if "convention" not in [p.name for p in entry[1]]:
        return entry
    for convention in CONVENTIONS:
        try:
            call(entry, convention=convention)
        except ValueError as e:
            if "convention" in str(e):
                continue
        # taken (or refused for another reason, which the good call then reports)
        return (*entry[:3], {**entry[3], "convention": convention})
    return entry


def problems(name: str) -> list[str]:
    """What each standard bad input does wrong for one callable (empty: every one gets a clear error)."""
    try:
        entry = _with_convention(CALLABLES[name])
        call(entry)
    except LookupError as e:
        return [f"the walk has no good value for the required parameter {e.args[0]!r}: add one to good()"]
    except (ValueError, RuntimeError) as e:
        if any(w in str(e) for w in ("CUDA", "Triton", "TRITON", "driver")):
            raise CannotRun(str(e)[:160]) from None
        return [f"the good call failed: {type(e).__name__}: {str(e)[:160]}"]
    wrong = []
    for case, (bad, words) in bad_inputs(entry[1], entry[3]).items():
        try:
            call(entry, **bad)
        except (TypeError, ValueError) as e:
            if not any(w.lower() in str(e).lower() for w in words):
                wrong.append(f"{case}: {type(e).__name__} does not name the problem: {str(e)[:100]}")
        except Exception as e:  # noqa: BLE001 - the point is to see what a bad input does
            wrong.append(f"{case}: {type(e).__name__}: {str(e)[:100]}")
        else:
            wrong.append(f"{case}: no error (a silent answer)")
    return wrong


TRITON = sorted(n for n in CALLABLES if ".ops.triton_" in n)


@pytest.mark.parametrize("name", sorted(CALLABLES))
def test_bad_input_gets_a_clear_error(name):
    try:
        wrong = problems(name)
    except CannotRun as e:
        where = " (walked under the interpreter by the test below)" if name in TRITON else ""
        pytest.skip(f"cannot run here{where}: {e}")
    assert not wrong, f"{name}:\n" + "\n".join(wrong)


_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("walk", sys.argv[1])
walk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(walk)
print(json.dumps({name: walk.problems(name) for name in walk.TRITON}))
"""


def test_the_triton_callables_under_the_interpreter():
    """The Triton ops and Functions, walked in a child process with ``TRITON_INTERPRET=1`` (Triton reads it
    when it is imported), so they run on CPU tensors here as they do compiled on a GPU."""
    import json
    import os
    import subprocess
    import sys

    assert len(TRITON) >= 8, TRITON
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", _CHILD, __file__], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(found) == TRITON
    assert not any(found.values()), {n: w for n, w in found.items() if w}


MODULES = discover_modules()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_norm_module_refuses_a_bad_input(name):
    """Each public nn.Module, built from its constructor's parameter names, refuses a 0-d x, an int32 x and
    a row of the wrong length with a TypeError/ValueError that names the problem."""
    cls = MODULES[name]
    params = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:] if p.default is MISSING]
    args = {p.name: good(p.name) for p in params}
    assert MISSING not in args.values(), f"no good value for {[n for n, v in args.items() if v is MISSING]}"
    module = cls(**args)
    module(torch.randn(2, D))
    for x, words in ((torch.tensor(1.0), ("0-d",)), (torch.randint(0, 3, (2, D), dtype=torch.int32), ("dtype",)),
                     (torch.randn(2, D - 1), ("shape", "size"))):
        with pytest.raises((TypeError, ValueError)) as err:
            module(x)
        assert any(w in str(err.value) for w in words), str(err.value)


def test_the_module_walk_finds_the_norm_modules():
    assert {"reference_impl.norms.dyt.DyT", "reference_impl.norms.derf.Derf"} <= set(MODULES), sorted(MODULES)
