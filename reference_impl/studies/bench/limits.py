"""The targets of one machine, and the structured summaries of the short-row and QK-norm groups.

Targets, evaluated per run on the machine that ran it (its ``cpu_identity``):

- forward into a reused buffer, rows of d >= 1024: at least 0.9x the copy into a reused buffer in float32;
  in bfloat16 0.9x on a CPU with AVX512-BF16 and 0.75x without it (the conversions cost more there; on a
  CPU with it, the path without it is also timed, forced by NORMLAB_CPU_ISA=avx512, against 0.75x);
- forward into a reused buffer, short rows (d of 64, 128, 256): at least 0.8x the copy, both dtypes (in
  bfloat16 also on the path without AVX512-BF16, forced on a CPU that has it, as for long rows);
- forward+backward under glibc with the tunables that keep freed memory: at least 0.8x of the copy
  ceiling (GB/s over the 5 N b bytes against the copy's GB/s at the same shape), RMSNorm and LayerNorm.

Each shape carries ``cache_resident``: the bytes the pass touches (input and output; forward+backward x,
y, dy and dx) fit in the machine's last-level cache, so the copy it is held against ran from the cache,
not at the memory's bandwidth (null where the file names no cache size).

Each shape is also held against the memory's own copy rate: the copy into a reused buffer at the largest
main shape of its dtype, the one furthest from the cache (``memory_copy_shape``, ``memory_copy_gbps``). ``copy_vs_memory`` says how much
faster the shape's own copy ran than that, and ``vs_memory_copy`` where the op stands against it. A shape
that misses its target against its own copy but reaches the threshold against the memory's copy is listed in
``cache_bound``: what it misses is a ceiling only a copy from the cache reaches. The rest of the misses are in
``not_cache_bound``: those belong to the op.
"""
from __future__ import annotations

import re

from .groups import GROUP_MODES, TILE_IMPLS

CEILING_MODES = ("forward_out", "short_rows", "qk_forward")
GROUP_PAIRS = {
    "short_rows": [("fused_rms_norm", "copy"), ("fused_rms_norm", "compiled_rms_norm"), ("fused_rms_norm", "F.rms_norm"),
                   *[("fused_rms_norm", t) for t in TILE_IMPLS]],
    "qk_forward": [("fused_qk_norm", "hf_qwen3_rms_norm"), ("fused_qk_norm", "compiled_qwen3_rms_norm"),
                   ("fused_qk_norm", "clone")],
    "qk_forward_backward": [("fused_qk_norm", "hf_qwen3_rms_norm"), ("fused_qk_norm", "compiled_qwen3_rms_norm")],
}
SHORT_DS = (64, 128, 256)
LONG_D = 1024


def ceiling_key(r: dict) -> tuple:
    """Which copy a record is held against: the copy of its own group (main shapes, short rows, QK-norm)
    at the same dtype and shape."""
    group = "short" if r["mode"] == "short_rows" else "qk" if r["mode"].startswith("qk_") else "main"
    return group, r["dtype"], r["rows"], r["hidden"]


def cache_bytes(identity: dict | None, level: str = "L3") -> int | None:
    """``"32768K"`` -> 33554432; None where the identity has no such cache."""
    size = ((identity or {}).get("caches") or {}).get(level)
    m = re.fullmatch(r"(\d+)([KMG]?)", size or "")
    if not m:
        return None
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def _touched(r: dict) -> int:
    b = r["bytes"]
    return b * 4 // 5 if r["mode"].endswith("forward_backward") else b  # x, y, dy, dx of the 5 N b


def _cmp(comparisons, **key) -> dict | None:
    return next((c for c in comparisons if all(c[k] == v for k, v in key.items())), None)


def _shape_entry(r: dict, threshold: float, ratio: float, l3: int | None) -> dict:
    return {"shape": "x".join(str(v) for v in r.get("shape") or (r["rows"], r["hidden"])), "hidden": r["hidden"],
            "ratio": ratio, "met": ratio >= threshold, "short_by": max(0.0, threshold - ratio),
            "cache_resident": None if l3 is None else _touched(r) <= l3}


def machine_targets(idx: dict, identity: dict, allocators, dtypes) -> dict:
    """The targets above, per dtype, with every shape's ratio, how far it is short and its cache flag."""
    l3 = cache_bytes(identity)
    bf16_hw = "avx512_bf16" in identity.get("flags", [])
    fb_alloc = "glibc_tunables" if "glibc_tunables" in allocators else "glibc"
    copies = {(k[2], k[3], k[4]): r for k, r in idx.items() if k[1] == "forward_out" and k[5] == "copy"}
    memory = memory_copies(copies)
    own_copies = {ceiling_key(r): r for k, r in idx.items() if k[5] == "copy"}  # every group's ceiling, by key
    specs = [("forward_out_long", "forward into a reused buffer vs the copy, d >= 1024", "forward_out", "glibc",
              ("fused_rms_norm", "fused_rms_norm_avx512"), lambda d: d >= LONG_D),
             ("forward_out_short", "forward into a reused buffer vs the copy, d of 64-256", "short_rows", "glibc",
              ("fused_rms_norm", "fused_rms_norm_avx512"), lambda d: d in SHORT_DS),
             ("forward_backward", "forward+backward vs the copy ceiling, " + fb_alloc, "forward_backward", fb_alloc,
              ("fused_rms_norm", "fused_layer_norm"), lambda d: True)]
    entries = []
    for name, what, mode, alloc, impls, keep in specs:
        for dn in dtypes:
            for impl in impls:
                if impl == "fused_rms_norm_avx512":  # the bfloat16 path without BF16 instructions, forced
                    threshold = 0.75 if name == "forward_out_long" else 0.8
                    basis = "no AVX512-BF16 (its path, forced on this CPU)"
                elif name == "forward_out_long" and dn == "bfloat16":
                    threshold, basis = (0.9, "AVX512-BF16 present") if bf16_hw else (0.75, "no AVX512-BF16")
                else:
                    threshold, basis = {"forward_out_long": 0.9, "forward_out_short": 0.8}.get(name, 0.8), "all CPUs"
                shapes = []
                for k, r in idx.items():
                    if k[:3] != (alloc, mode, dn) or k[5] != impl or not keep(k[4]):
                        continue
                    twin = None
                    if mode == "forward_backward":
                        c = copies.get((dn, k[3], k[4]))
                        if c is None:
                            continue
                        ratio = r["gbps"] / c["gbps"]
                        twin = idx.get((alloc, mode, dn, k[3], k[4], "traffic_twin"))
                    elif "ratio_copy" in r:
                        ratio = r["ratio_copy"]
                    else:
                        continue
                    e = _shape_entry(r, threshold, ratio, l3)
                    mem, own = memory.get(dn), c if mode == "forward_backward" else own_copies.get(ceiling_key(r))
                    if mem is not None:
                        e["vs_memory_copy"] = r["gbps"] / mem["gbps"]
                        e["copy_vs_memory"] = own["gbps"] / mem["gbps"] if own else None
                    if twin is not None:  # the same bytes moved by plain ops: is the shortfall the traffic's?
                        e["twin_vs_copy"] = twin["gbps"] / c["gbps"]
                        e["vs_twin"] = r["gbps"] / twin["gbps"]
                    shapes.append(e)
                if not shapes and impl == "fused_rms_norm_avx512":
                    continue  # measured only in bfloat16 on a CPU with AVX512-BF16
                worst = min(shapes, key=lambda e: e["ratio"]) if shapes else None
                entries.append({"target": name, "what": what, "impl": impl, "dtype": dn, "threshold": threshold,
                                "basis": basis, "shapes": shapes, "count": len(shapes),
                                "met": sum(e["met"] for e in shapes),
                                "worst": worst["ratio"] if worst else None,
                                "worst_shape": worst["shape"] if worst else None,
                                "short_by": worst["short_by"] if worst else None,
                                "cache_resident_shapes": [e["shape"] for e in shapes if e["cache_resident"]],
                                **_cache_bound(shapes, threshold, memory.get(dn))})
    return {"l3_bytes": l3, "avx512_bf16": bf16_hw, "forward_backward_allocator": fb_alloc, "entries": entries}


def memory_copies(copies: dict) -> dict:
    """Per dtype, the copy at the main shape with the most bytes: the one furthest from the cache, whose rate
    stands for the memory's own (``copies`` maps (dtype, rows, d) to the forward_out copy record)."""
    out = {}
    for (dn, _, _), r in copies.items():
        if dn not in out or r["bytes"] > out[dn]["bytes"]:
            out[dn] = r
    return out


def _cache_bound(shapes: list[dict], threshold: float, mem: dict | None) -> dict:
    """The shapes that miss the target against their own copy, split by whether they reach it against the
    memory's copy (the miss is the cache's ceiling) or not (the miss is the op's)."""
    missed = [e for e in shapes if not e["met"]]
    bound = [e["shape"] for e in missed if e.get("vs_memory_copy") is not None and e["vs_memory_copy"] >= threshold]
    return {"memory_copy_shape": None if mem is None else f"{mem['rows']}x{mem['hidden']}",
            "memory_copy_gbps": None if mem is None else mem["gbps"],
            "memory_worst": min((e["vs_memory_copy"] for e in shapes if e.get("vs_memory_copy") is not None), default=None),
            "cache_bound": bound, "not_cache_bound": [e["shape"] for e in missed if e["shape"] not in bound]}


def short_rows_summary(idx: dict, comparisons: list[dict], dtypes, identity: dict | None) -> dict:
    """One record per dtype and short-row shape: GB/s of the copy and this op, every line's ratio to the
    copy (tile settings, torch.compile, F.rms_norm), and the labels against the copy and the peers."""
    l3 = cache_bytes(identity)
    rows = []
    for k, copy in idx.items():
        if k[1] != "short_rows" or k[5] != "copy":
            continue
        alloc, _, dn, r, d, _ = k
        g = lambda impl: idx.get((alloc, "short_rows", dn, r, d, impl))  # noqa: E731
        touched = (g("fused_rms_norm") or copy)["bytes"]  # input, output and gain, as machine_targets counts
        rec = {"dtype": dn, "shape": f"{r}x{d}", "hidden": d, "input_mb": copy["bytes"] / 2 / 1e6,
               "copy_gbps": copy["gbps"], "cache_resident": None if l3 is None else touched <= l3}
        for impl in ("fused_rms_norm", "fused_rms_norm_avx512", *TILE_IMPLS, "compiled_rms_norm", "F.rms_norm"):
            x = g(impl)
            rec[f"{impl}_gbps"] = x["gbps"] if x else None
            rec[f"{impl}_ratio"] = x["gbps"] / copy["gbps"] if x else None
        for other in ("copy", "compiled_rms_norm", "F.rms_norm"):
            c = _cmp(comparisons, allocator=alloc, mode="short_rows", dtype=dn, rows=r, hidden=d,
                     a="fused_rms_norm", b=other)
            rec[f"vs_{other}"] = c["label"] if c else None
        rows.append(rec)
    order = {dn: i for i, dn in enumerate(dtypes)}
    rows.sort(key=lambda e: (order.get(e["dtype"], 99), e["hidden"]))
    return {"rows": rows}


def qk_summary(idx: dict, comparisons: list[dict], dtypes) -> dict:
    """One record per dtype, shape and pass: GB/s of each line, this op's speed ratio to the peers
    (t_peer / t_ours, range over the rounds) with the label, and the forward's ratio to the copy."""
    rows = []
    for k, r in idx.items():
        if k[1] not in ("qk_forward", "qk_forward_backward") or k[5] != "fused_qk_norm":
            continue
        alloc, mode, dn, nr, d, _ = k
        g = lambda impl: idx.get((alloc, mode, dn, nr, d, impl))  # noqa: E731
        rec = {"dtype": dn, "pass": "forward" if mode == "qk_forward" else "forward+backward",
               "shape": "x".join(str(v) for v in r["shape"]), "head_dim": d, "input_mb": nr * d * (4 if dn == "float32" else 2) / 1e6,
               "allocator": alloc, "fused_gbps": r["gbps"], "ratio_copy": r.get("ratio_copy")}
        for peer in ("hf_qwen3_rms_norm", "compiled_qwen3_rms_norm"):
            p = g(peer)
            rec[f"{peer}_gbps"] = p["gbps"] if p else None
            c = _cmp(comparisons, allocator=alloc, mode=mode, dtype=dn, rows=nr, hidden=d, a="fused_qk_norm", b=peer)
            rec[f"vs_{peer}"] = c["ratio"] if c else None
            rec[f"vs_{peer}_low"] = c["ratio_low"] if c else None
            rec[f"vs_{peer}_high"] = c["ratio_high"] if c else None
            rec[f"vs_{peer}_label"] = c["label"] if c else None
        rows.append(rec)
    order = {dn: i for i, dn in enumerate(dtypes)}
    rows.sort(key=lambda e: (e["pass"] != "forward", order.get(e["dtype"], 99), e["head_dim"]))
    return {"rows": rows}


__all__ = ["CEILING_MODES", "GROUP_MODES", "GROUP_PAIRS", "cache_bytes", "ceiling_key", "machine_targets",
           "memory_copies", "qk_summary", "short_rows_summary"]
