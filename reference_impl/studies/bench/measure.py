"""The timed loop of the CPU benchmark: rounds, inputs, first touch, the decoder block, flop counts,
the worker process and the coordinator that starts one worker per allocator setting."""
from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from ...ops import library as fused
from .cases import (ALLOCATORS, DTYPES, EPS, IMPLS, MAX_CALLS, REPO, ROUND_BUDGET_S, Unavailable, make_case,
                    min_bytes, validate)
from .groups import GROUP_IMPLS, GROUP_ROUNDS, TILE_IMPLS, case_env, group_inputs, make_group_case, validate_group

# ------------------------------------------------------------------------------------------ timing

def _minflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _quantiles(v: list[float]) -> tuple[float, float]:
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def time_cases(cases: dict, repeats: int, quick: bool) -> dict:
    """Rounds of interleaved calls (order rotated per round, each case's block led by one untimed call); per
    implementation the statistics."""
    names = list(cases)
    est = {}
    for name in names:  # warm-up (and compile), then one timed call to size k
        with case_env(cases[name]):  # a case's environment (a tile setting) is set outside the timing
            cases[name]()
            t0 = time.perf_counter()
            cases[name]()
            est[name] = time.perf_counter() - t0
    k = {n: 1 if quick else max(1, min(MAX_CALLS, int(ROUND_BUDGET_S / max(est[n], 1e-9)))) for n in names}
    samples = {n: [] for n in names}
    rounds = {n: [] for n in names}
    faults = {n: 0 for n in names}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            ts = []
            with case_env(cases[n]):
                # one untimed call first: what the previous case left behind (its lines in the caches, the
                # buffers it freed) would otherwise be charged to whichever case follows it in the round
                cases[n]()
                f0 = _minflt()
                for _ in range(k[n]):
                    t0 = time.perf_counter()
                    cases[n]()
                    ts.append(time.perf_counter() - t0)
                faults[n] += _minflt() - f0
            samples[n] += ts
            rounds[n].append(statistics.median(ts))
    out = {}
    for n in names:
        s = samples[n]
        q1, q3 = _quantiles(s)
        out[n] = {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "q1_s": q1, "q3_s": q3,
                  "round_median_s": rounds[n], "calls": len(s), "calls_per_round": k[n],
                  "minflt_per_call": faults[n] / len(s)}
    return out


def _inputs(rows: int, d: int, dname: str, grad: bool):
    dtype = DTYPES[dname]
    g = torch.Generator().manual_seed(rows * 31 + d)
    x = torch.randn(rows, d, generator=g).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    b = (0.1 * torch.randn(d, generator=g)).to(dtype)
    dy = torch.randn(rows, d, generator=g).to(dtype) if grad else None
    return x, w, b, dy


def measure_config(mode: str, dname: str, rows: int, d: int, repeats: int, quick: bool, allocator: str) -> list[dict]:
    x, w, b, dy = _inputs(rows, d, dname, mode == "forward_backward")
    y = torch.empty_like(x) if mode == "forward_out" else None
    if y is not None:
        y.zero_()  # touch the reused buffer once, outside any timing
    cases, recs = {}, []
    for impl in IMPLS[mode]:
        rec = {"allocator": allocator, "mode": mode, "dtype": dname, "rows": rows, "hidden": d, "impl": impl,
               "bytes": min_bytes(rows, d, DTYPES[dname], mode, impl)}
        try:
            cases[impl] = make_case(impl, mode, x, w, b, dy, y)
        except Unavailable as exc:
            rec["skipped"] = str(exc)
        recs.append(rec)
    return timed_records(cases, recs, repeats, quick)


def timed_records(cases: dict, recs: list[dict], repeats: int, quick: bool) -> list[dict]:
    """Times the cases together (``time_cases``) and adds each one's statistics and GB/s to its record."""
    stats = time_cases(cases, repeats, quick)
    for rec in recs:
        st = stats.get(rec["impl"])
        if st is None:
            continue
        rec.update(st)
        rec["gbps"] = rec["bytes"] / st["median_s"] / 1e9
        rec["gbps_min"] = rec["bytes"] / st["max_s"] / 1e9
        rec["gbps_max"] = rec["bytes"] / st["min_s"] / 1e9
    return recs


def measure_group(mode: str, dname: str, shape, repeats: int, quick: bool, allocator: str) -> list[dict]:
    """Records of one group configuration (the fields of measure_config's, plus ``shape`` for QK), timed
    over ``GROUP_ROUNDS * repeats`` rounds (one round for a quick run)."""
    x, w, dy, y = group_inputs(mode, shape, dname)
    rows, d = x.numel() // x.shape[-1], x.shape[-1]
    cases, recs = {}, []
    for impl in GROUP_IMPLS[mode]:
        rec = {"allocator": allocator, "mode": mode, "dtype": dname, "rows": rows, "hidden": d, "impl": impl,
               "bytes": min_bytes(rows, d, DTYPES[dname], mode, impl)}
        if mode != "short_rows":
            rec["shape"] = list(shape)
        if impl in TILE_IMPLS:
            rec["tile_bytes"] = TILE_IMPLS[impl]
        try:
            cases[impl] = make_group_case(impl, mode, x, w, dy, y)
        except Unavailable as exc:
            rec["skipped"] = str(exc)
        recs.append(rec)
    return timed_records(cases, recs, repeats if quick else GROUP_ROUNDS * repeats, quick)


def first_touch(rows: int, d: int, repeats: int, quick: bool) -> dict:
    """What a fresh buffer costs: the same copy into a reused buffer, into a fresh buffer that was already
    written once (outside the timing), allocating (clone), and just writing a fresh buffer once."""
    x = torch.randn(rows, d)
    y = torch.empty_like(x)
    y.zero_()
    state = {}

    def prepare_fresh():
        state["z"] = torch.empty_like(x)
        state["z"].zero_()

    def copy_fresh_pretouched():
        state["z"].copy_(x)

    cases = {"copy_reused": lambda: y.copy_(x), "clone": lambda: x.clone(),
             "empty_then_write": lambda: torch.empty_like(x).fill_(1.0)}
    stats = time_cases(cases, repeats, quick)
    # the pre-touched case needs untimed preparation before each call
    ts, faults = [], 0
    for _ in range(max(3, repeats) if not quick else 1):
        prepare_fresh()
        f0 = _minflt()
        t0 = time.perf_counter()
        copy_fresh_pretouched()
        ts.append(time.perf_counter() - t0)
        faults += _minflt() - f0
        state.clear()
    q1, q3 = _quantiles(ts)
    stats["copy_fresh_pretouched"] = {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
                                      "q1_s": q1, "q3_s": q3, "round_median_s": ts, "calls": len(ts),
                                      "calls_per_round": 1, "minflt_per_call": faults / len(ts)}
    nbytes = x.numel() * x.element_size()
    for name, st in stats.items():
        moved = nbytes if name == "empty_then_write" else 2 * nbytes
        st["bytes"] = moved
        st["gbps"] = moved / st["median_s"] / 1e9
    return {"rows": rows, "hidden": d, "dtype": "float32", "input_bytes": nbytes, "pages_4k": nbytes // 4096,
            "cases": stats}


# ------------------------------------------------------------------------------------------ the decoder block

BLOCK = {"hidden_size": 512, "intermediate_size": 1408, "num_attention_heads": 8, "num_key_value_heads": 8,
         "tokens": 256, "batch": 1, "dtype": "float32"}


# --8<-- [start:block]
class FusedRMSNorm(torch.nn.Module):
    """Drop-in for LlamaRMSNorm (same weight, eps and casting order) backed by fused_rms_norm."""

    def __init__(self, hf_norm):
        super().__init__()
        self.weight = hf_norm.weight
        self.eps = hf_norm.variance_epsilon

    def forward(self, x):
        return fused.fused_rms_norm(x, self.weight, self.eps)
# --8<-- [end:block]


def block_share(steps: int, quick: bool) -> dict:
    """A Llama decoder layer (transformers' LlamaDecoderLayer, random weights) timed over many steps with
    its two norms as Hugging Face's LlamaRMSNorm, as fused_rms_norm, and replaced by identity, interleaved.
    share = (t_norm - t_identity) / t_norm, reported only where the gap exceeds the rounds' spread."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=BLOCK["hidden_size"], intermediate_size=BLOCK["intermediate_size"],
                      num_attention_heads=BLOCK["num_attention_heads"],
                      num_key_value_heads=BLOCK["num_key_value_heads"], num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).eval()
    hf = (layer.input_layernorm, layer.post_attention_layernorm)
    variants = {"hf_llama_rms_norm": hf, "fused_rms_norm": tuple(FusedRMSNorm(n) for n in hf),
                "identity": (torch.nn.Identity(), torch.nn.Identity())}
    x = torch.randn(BLOCK["batch"], BLOCK["tokens"], BLOCK["hidden_size"])
    pos = torch.arange(BLOCK["tokens"]).unsqueeze(0)
    rope = LlamaRotaryEmbedding(cfg)(x, pos)

    def step(mode, norms):
        layer.input_layernorm, layer.post_attention_layernorm = norms
        if mode == "forward":
            with torch.no_grad():
                layer(x, position_embeddings=rope, position_ids=pos)
        else:
            layer.zero_grad(set_to_none=True)
            layer(x, position_embeddings=rope, position_ids=pos).sum().backward()

    out: dict = {"config": BLOCK, "steps_per_round": 1 if quick else steps, "source": "transformers LlamaDecoderLayer"}
    for mode in ("forward", "forward_backward"):
        cases = {k: (lambda n=n, m=mode: step(m, n)) for k, n in variants.items()}
        rounds = 1 if quick else 5
        per = {k: [] for k in cases}
        for k in cases:
            cases[k]()
        names = list(cases)
        for r in range(rounds):
            for k in names[r % 3:] + names[: r % 3]:
                t0 = time.perf_counter()
                for _ in range(out["steps_per_round"]):
                    cases[k]()
                per[k].append((time.perf_counter() - t0) / out["steps_per_round"])
        # the rounds only: the shares and their labels are the analysis's (analyse.block_shares)
        out[mode] = {"round_s": per, "median_s": {k: statistics.median(v) for k, v in per.items()}}
        layer.input_layernorm, layer.post_attention_layernorm = hf
    out["rounds"] = 1 if quick else 5
    return out


# ------------------------------------------------------------------------------------------ flops (claim C05)

# --8<-- [start:flops]
def count_flops(fn, d: int) -> dict:
    """Floating-point operations of one row of length d, counted from the traced graph of ``fn(x)``.

    Each element-wise aten op costs one operation per output element; a mean over d elements costs d-1
    additions and one division; casts and views cost nothing. Returns total and per-element counts.
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(1, d)
    gm = make_fx(fn)(x)
    ew = {"mul", "add", "sub", "div", "rsqrt", "pow", "sqrt"}
    total = 0
    ops: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = node.target.__name__.split(".")[0]
        if name in ew:
            cost = math.prod(node.meta["val"].shape) if hasattr(node.meta.get("val"), "shape") else 1
        elif name == "mean":
            cost = math.prod(node.args[0].meta["val"].shape)  # (d-1) adds and 1 division per output
        elif name == "sum":
            cost = math.prod(node.args[0].meta["val"].shape) - math.prod(node.meta["val"].shape)
        else:
            continue
        ops[name] = ops.get(name, 0) + cost
        total += cost
    return {"d": d, "total": total, "per_element": total / d, "ops": ops}


def rms_flops_fn(x):
    """RMSNorm forward as the reference computes it, with a gain (Llama's and the paper's form)."""
    w = torch.ones(x.shape[-1])
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def ln_flops_fn(x):
    """LayerNorm forward with gain and bias, two-pass variance (the reference's form)."""
    w, b = torch.ones(x.shape[-1]), torch.zeros(x.shape[-1])
    xc = x - x.mean(-1, keepdim=True)
    return xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + 1e-5) * w + b
# --8<-- [end:flops]


def flop_summary(d_values=(1024, 4096, 8192)) -> dict:
    out = {}
    for d in d_values:
        r, l = count_flops(rms_flops_fn, d), count_flops(ln_flops_fn, d)
        out[str(d)] = {"rms": r, "layer_norm": l, "reduction": 1 - r["total"] / l["total"]}
    return out


# ------------------------------------------------------------------------------------------ the worker

def _prepare_process() -> None:
    fused.load()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 1024)


def worker(job: dict) -> dict:
    """One allocator setting in this process: validation, then every configuration of its modes."""
    _prepare_process()
    allocator, modes, quick = job["allocator"], job["modes"], job["quick"]
    out: dict = {"allocator": allocator, "validation": {}, "results": [], "load_avg_start": list(os.getloadavg())}
    for mode in modes:
        for dname in job["dtypes"]:
            for impl in IMPLS[mode]:
                key = f"{mode}/{dname}/{impl}"
                try:
                    validate(impl, mode, dname)
                    out["validation"][key] = "passed"
                except Unavailable as exc:
                    out["validation"][key] = f"unavailable: {exc}"
    groups = job.get("groups", {})  # mode -> shapes, for the short-row and QK-norm groups
    for mode in groups:
        for dname in job["dtypes"]:
            for impl in GROUP_IMPLS[mode]:
                key = f"{mode}/{dname}/{impl}"
                try:
                    validate_group(impl, mode, dname)
                    out["validation"][key] = "passed"
                except Unavailable as exc:
                    out["validation"][key] = f"unavailable: {exc}"
    for mode in modes:
        for dname in job["dtypes"]:
            for rows, d in job["shapes"]:
                out["results"] += measure_config(mode, dname, rows, d, job["repeats"], quick, allocator)
                print(f"PROGRESS {allocator} {mode} {dname} {rows}x{d}", file=sys.stderr, flush=True)
    for mode, shapes in groups.items():
        for dname in job["dtypes"]:
            for shape in shapes:
                out["results"] += measure_group(mode, dname, tuple(shape), job["repeats"], quick, allocator)
                print(f"PROGRESS {allocator} {mode} {dname} {shape}", file=sys.stderr, flush=True)
    if job.get("first_touch"):
        rows, d = job["first_touch"]
        out["first_touch"] = first_touch(rows, d, job["repeats"], quick)
    if job.get("block"):
        out["block"] = block_share(job["block_steps"], quick)
    if job.get("overhead"):
        from . import overhead
        out["call_overhead"] = {"allocator": allocator, **overhead.measure(quick)}
    out["load_avg_end"] = list(os.getloadavg())
    out["torch_threads"] = torch.get_num_threads()
    return out


# ------------------------------------------------------------------------------------------ the coordinator

def allocator_available(name: str) -> tuple[bool, str]:
    spec = ALLOCATORS[name]
    lib = spec["env"].get("LD_PRELOAD")
    if lib and not Path(lib).exists():
        return False, f"{lib} is missing: install Debian's {spec['package']} (apt-get install {spec['package']})"
    return True, "available"


def wait_for_quiet(max_load: float, wait_s: float, force: bool, quick: bool) -> dict:
    """Waits until the 1-minute load average is at most max_load; refuses (SystemExit 3) past wait_s."""
    t0 = time.monotonic()
    first = os.getloadavg()[0]
    while os.getloadavg()[0] > max_load and not (force or quick):
        if time.monotonic() - t0 > wait_s:
            raise SystemExit(f"bench: the machine is busy (1-minute load {os.getloadavg()[0]:.2f} > {max_load}) after "
                             f"waiting {wait_s:.0f} s; measure in a quiet window, or pass --force (recorded)")
        print(f"bench: waiting for a quiet machine (1-minute load {os.getloadavg()[0]:.2f} > {max_load})",
              file=sys.stderr, flush=True)
        time.sleep(15)
    now = os.getloadavg()[0]
    return {"max_load": max_load, "load_when_called": first, "load_at_start": now,
            "waited_s": round(time.monotonic() - t0, 1), "busy_at_start": now > max_load,
            "forced": bool(force and now > max_load), "quick": quick}


def run_worker(allocator: str, job: dict) -> dict:
    env = {**os.environ, **ALLOCATORS[allocator]["env"]}
    proc = subprocess.Popen([sys.executable, "-m", "reference_impl.studies.bench", "--worker", json.dumps(job)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark worker for allocator {allocator} failed (exit {proc.returncode}):\n{err[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])
