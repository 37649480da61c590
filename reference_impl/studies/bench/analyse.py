"""From raw records to verdicts: ratios, "faster" only beyond the spread, the targets and the advice."""
from __future__ import annotations

import math
import statistics


from .cases import ALLOCATORS, BLOCK_ALLOCATOR, IMPLS, LABELS, MODES, ORT_OPS, OUT_MODE_ALLOCATOR, RMS_NORMS
from .groups import GROUP_MODES
from .limits import CEILING_MODES, GROUP_PAIRS, ceiling_key, machine_targets, qk_summary, short_rows_summary

MIN_ROUNDS_FOR_VERDICT = 3


def verdict(a_rounds: list[float], b_rounds: list[float]) -> str:
    """'faster' when every round of a beat every round of b, 'slower' the other way round, else 'within
    noise'; 'not repeated' with fewer than MIN_ROUNDS_FOR_VERDICT rounds (a smoke run)."""
    if min(len(a_rounds), len(b_rounds)) < MIN_ROUNDS_FOR_VERDICT:
        return "not repeated"
    if max(a_rounds) < min(b_rounds):
        return "faster"
    if max(b_rounds) < min(a_rounds):
        return "slower"
    return "within noise"


def block_shares(block: dict) -> dict:
    """The decoder block's rounds (measure.block_share) with, per norm and pass, the share of the step the
    norms take: measured only where the block without norms ran faster in every round, else its label."""
    out = dict(block)
    for mode in ("forward", "forward_backward"):
        if mode not in block:
            continue
        per, med = block[mode]["round_s"], block[mode]["median_s"]
        res = {"round_s": per, "median_s": med}
        for k in ("hf_llama_rms_norm", "fused_rms_norm"):
            label = verdict(per["identity"], per[k])  # identity faster than the block with norms?
            sep = label == "faster"
            share = (med[k] - med["identity"]) / med[k]
            upper = max(0.0, (max(per[k]) - min(per["identity"])) / med[k])
            res[k] = {"separated": sep, "share": share if sep else None, "share_upper_bound": upper,
                      "label": "measured" if sep else label}
        out[mode] = res
    return out


def _ratio_stats(a: dict, b: dict) -> dict:
    """Speed of a relative to b (t_b / t_a), with the separation verdict from the rounds' spread."""
    return {"ratio": b["median_s"] / a["median_s"],
            "ratio_low": min(b["round_median_s"]) / max(a["round_median_s"]),
            "ratio_high": max(b["round_median_s"]) / min(a["round_median_s"]),
            "label": verdict(a["round_median_s"], b["round_median_s"])}


def index_results(results: list[dict]) -> dict:
    """The run's timed records by (allocator, mode, dtype, rows, hidden, impl)."""
    return {(r["allocator"], r["mode"], r["dtype"], r["rows"], r["hidden"], r["impl"]): r
            for r in results if "median_s" in r}


def analyse(results: list[dict], allocators: list[str], shapes, dtypes, identity: dict | None = None) -> dict:
    """Ratios against the ceilings, comparisons with separation labels, and the targets, from one run; with
    the machine's identity (cpu_identity), the targets of that machine (limits.machine_targets) too."""
    idx = index_results(results)
    ceiling = {}
    for r in results:
        if r["mode"] in CEILING_MODES and r["impl"] in ("copy", "stream_copy") and "gbps" in r:
            ceiling.setdefault(ceiling_key(r), {})[r["impl"]] = r["gbps"]
    for r in results:
        c = ceiling.get(ceiling_key(r), {})
        if "gbps" in r and "copy" in c:
            r["ratio_copy"] = r["gbps"] / c["copy"]
            r["ratio_best_ceiling"] = r["gbps"] / max(c.values())
    comparisons = []
    pairs = {"forward_out": [("fused_rms_norm", "copy"), ("fused_rms_norm", "compiled_rms_norm"),
                             ("fused_rms_norm", "ort_rms_normalization"), ("fused_rms_norm", "ort_simplified_layer_norm"),
                             ("fused_layer_norm", "ort_layer_normalization"), ("fused_rms_norm", "fused_layer_norm")],
             "forward_alloc": [("fused_rms_norm", "compiled_rms_norm"), ("fused_rms_norm", "F.rms_norm"),
                               ("fused_rms_norm", "ort_rms_normalization"), ("fused_rms_norm", "ort_simplified_layer_norm"),
                               ("fused_layer_norm", "F.layer_norm"), ("fused_layer_norm", "ort_layer_normalization"),
                               ("fused_rms_norm", "clone")],
             "forward_backward": [("fused_rms_norm", "compiled_rms_norm"), ("fused_rms_norm", "F.rms_norm"),
                                  ("fused_layer_norm", "F.layer_norm"), ("fused_layer_norm", "compiled_layer_norm"),
                                  ("fused_rms_norm", "fused_layer_norm"), ("fused_rms_norm", "traffic_twin"),
                                  ("fused_layer_norm", "traffic_twin")],
             **GROUP_PAIRS}
    for (alloc, mode, dname, rows, d, impl), a in idx.items():
        for x, y in pairs.get(mode, ()):
            if impl == x and (alloc, mode, dname, rows, d, y) in idx:
                comparisons.append({"allocator": alloc, "mode": mode, "dtype": dname, "rows": rows, "hidden": d,
                                    "a": x, "b": y, **_ratio_stats(a, idx[(alloc, mode, dname, rows, d, y)])})
    out = {"comparisons": comparisons, "targets": targets(idx, comparisons, allocators, shapes, dtypes),
           "advice": advice(idx, allocators, shapes, dtypes)}
    out["ln_vs_rms"] = ln_vs_rms(idx, comparisons, allocators, shapes, dtypes)
    if any(r["mode"] in GROUP_MODES for r in results):
        out["short_rows"] = short_rows_summary(idx, comparisons, dtypes, identity)
        out["qk_norm"] = qk_summary(idx, comparisons, dtypes)
    if identity is not None:
        out["machine_targets"] = machine_targets(idx, identity, allocators, dtypes)
    return out


def ln_vs_rms(idx, comparisons, allocators, shapes, dtypes) -> dict:
    """Time saved by the fused RMSNorm against the fused LayerNorm (1 - t_rms / t_ln) over the shapes, per
    mode and dtype: forward into a reused buffer, and forward+backward under BLOCK_ALLOCATOR (or glibc)."""
    out: dict = {}
    alloc_bwd = BLOCK_ALLOCATOR if BLOCK_ALLOCATOR in allocators else OUT_MODE_ALLOCATOR
    for mode, alloc in (("forward_out", OUT_MODE_ALLOCATOR), ("forward_alloc", alloc_bwd), ("forward_backward", alloc_bwd)):
        for dn in dtypes:
            red, labels = [], []
            for r, d in shapes:
                a, b = idx.get((alloc, mode, dn, r, d, "fused_rms_norm")), idx.get((alloc, mode, dn, r, d, "fused_layer_norm"))
                if a and b:
                    red.append(1 - a["median_s"] / b["median_s"])
                    labels.append(verdict(a["round_median_s"], b["round_median_s"]))
            out.setdefault(mode, {})[dn] = {
                "allocator": alloc, "shapes": len(red),
                "time_reduction_min": min(red) if red else None,
                "time_reduction_median": statistics.median(red) if red else None,
                "time_reduction_max": max(red) if red else None,
                "separated_shapes": sum(v == "faster" for v in labels)}
    return out



def _worst(entries: list[dict], key: str, threshold: float) -> dict:
    vals = [e for e in entries if e.get(key) is not None]
    if not vals:
        return {"shapes": 0, "met": 0, "all_met": None, "worst": None, "worst_shape": None, "missed_by": None,
                "separated_faster": 0}
    w = min(vals, key=lambda e: e[key])
    met = sum(e[key] >= threshold for e in vals)
    return {"shapes": len(vals), "met": met, "all_met": met == len(vals), "worst": w[key],
            "worst_shape": f"{w['rows']}x{w['hidden']}", "missed_by": max(0.0, threshold - w[key]),
            "best": max(e[key] for e in vals), "separated_faster": sum(e.get("label") == "faster" for e in vals)}


def targets(idx: dict, comparisons: list[dict], allocators, shapes, dtypes) -> dict:
    out: dict = {}
    for dname in dtypes:
        t: dict = {}
        rows = [r for k, r in idx.items() if k[1] == "forward_out" and k[2] == dname and k[5] == "fused_rms_norm"
                and "ratio_copy" in r]
        t["forward_out_vs_copy"] = {"threshold": 0.9, **_worst(rows, "ratio_copy", 0.9)}
        for peer in ("ort_rms_normalization", "ort_simplified_layer_norm"):
            cs = [c for c in comparisons if c["mode"] == "forward_out" and c["dtype"] == dname
                  and c["a"] == "fused_rms_norm" and c["b"] == peer]
            t[f"forward_out_vs_{peer}"] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
        cs = [c for c in comparisons if c["mode"] == "forward_out" and c["dtype"] == dname
              and c["a"] == "fused_layer_norm" and c["b"] == "ort_layer_normalization"]
        t["forward_out_ln_vs_ort_layer_normalization"] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
        for mode in ("forward_alloc", "forward_backward"):
            per = {}
            for alloc in allocators:
                cs = [c for c in comparisons if c["mode"] == mode and c["dtype"] == dname and c["allocator"] == alloc
                      and c["a"] == "fused_rms_norm" and c["b"] == "compiled_rms_norm"]
                per[alloc] = {"threshold": 1.0, **_worst(cs, "ratio", 1.0)}
            t[f"{mode}_vs_compile"] = per
        out[dname] = t
    return out


def _geomean(v):
    v = [x for x in v if x]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def advice(idx: dict, allocators, shapes, dtypes) -> dict:
    """Which RMSNorm implementation takes the least time per (mode, dtype, allocator), and which allocator
    suits whom."""
    out: dict = {"fastest": {}, "allocators": {}}
    for mode in MODES:
        for dname in dtypes:
            for alloc in allocators:
                per = {}
                for impl in IMPLS[mode]:
                    if impl not in RMS_NORMS:
                        continue
                    ts = [idx[(alloc, mode, dname, r, d, impl)]["median_s"] for r, d in shapes
                          if (alloc, mode, dname, r, d, impl) in idx]
                    if len(ts) == len(shapes):
                        per[impl] = _geomean(ts)
                if not per:
                    continue
                ranked = sorted(per, key=per.get)
                best = ranked[0]
                second = ranked[1] if len(ranked) > 1 else None
                sep = 0
                if second:
                    for r, d in shapes:
                        a, b = idx[(alloc, mode, dname, r, d, best)], idx[(alloc, mode, dname, r, d, second)]
                        sep += _ratio_stats(a, b)["label"] == "faster"
                out["fastest"].setdefault(mode, {}).setdefault(dname, {})[alloc] = {
                    "impl": best, "label": LABELS[best], "runner_up": second,
                    "runner_up_label": LABELS[second] if second else None,
                    "margin": per[second] / per[best] if second else None,
                    "separated_shapes": sep, "shapes": len(shapes)}
    base = "glibc"
    for who, impls in (("this_op", ("fused_rms_norm",)), ("plain_pytorch", ("F.rms_norm", "compiled_rms_norm"))):
        for mode in ("forward_alloc", "forward_backward"):
            for dname in dtypes:
                gain = {}
                for alloc in allocators:
                    rs = []
                    for impl in impls:
                        for r, d in shapes:
                            a, b = (alloc, mode, dname, r, d, impl), (base, mode, dname, r, d, impl)
                            if a in idx and b in idx:
                                rs.append(idx[b]["median_s"] / idx[a]["median_s"])
                    gain[alloc] = _geomean(rs)
                known = {k: v for k, v in gain.items() if v is not None}
                best = max(known, key=known.get) if known else None
                out["allocators"].setdefault(who, {}).setdefault(mode, {})[dname] = {
                    "speedup_over_glibc": gain, "best": best,
                    "best_label": ALLOCATORS[best]["label"] if best else None,
                    "best_speedup": known.get(best) if best else None}
    faults = {}
    for alloc in allocators:
        v = [r["minflt_per_call"] / (r["bytes"] / 2 / 4096) for k, r in idx.items()
             if k[0] == alloc and k[1] == "forward_alloc" and k[5] == "clone"]
        faults[alloc] = statistics.median(v) if v else None
    out["clone_faults_per_output_page"] = faults
    return out



def ort_support(workers: dict) -> dict:
    """Per ORT op and dtype: whether its CPU kernel ran (from the validation step), and the error if not."""
    out: dict = {}
    for w in workers.values():
        for key, verdict in w["validation"].items():
            mode, dname, impl = key.split("/")
            if impl.startswith("ort_") and mode == "forward_out":
                op = ORT_OPS[impl][0]
                out.setdefault(op, {})[dname] = {"supported": verdict == "passed",
                                                 "detail": verdict}
    return out
