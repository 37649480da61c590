"""From timings to comparisons: ratios and "faster" only beyond the spread."""
from __future__ import annotations

from .cases import TARGET_SHAPE


def _beyond_spread(fast: dict, slow: dict) -> bool:
    """'faster' only where the gap exceeds the spread: the slowest repetition of one beats the fastest of
    the other."""
    return fast["ms_max"] < slow["ms_min"]


def _ratio(slow: dict | None, fast: dict | None):
    return None if slow is None or fast is None else round(slow["ms"] / fast["ms"], 3)


def summarize(results: dict) -> dict:
    """The targets at bf16 32768x8192, the ratios the claims ledger needs (C16, C20), and our Triton
    kernel against Liger-Kernel, torch.compile, F.rms_norm and the CUDA kernels. A value is None where an
    implementation it needs was left out (it failed to run; see validation_rel_l2)."""
    s: dict = {}
    bf = results.get("bfloat16", {}).get(TARGET_SHAPE)
    if bf and "forward" in bf and "forward_backward" in bf:
        f, fb = bf["forward"], bf["forward_backward"]

        def frac(g, impl):
            return g[impl]["frac_copy"] if impl in g else None

        def beyond(g, fast, slow):
            return _beyond_spread(g[fast], g[slow]) if fast in g and slow in g else None

        s["target_bf16_32768x8192"] = {
            "fwd_frac_copy": frac(f, "normlab_v4"),
            "fwd_meets_90pct_copy": None if frac(f, "normlab_v4") is None else frac(f, "normlab_v4") >= 0.9,
            "fwd_faster_than_F_rms_norm": beyond(f, "normlab_v4", "F_rms_norm"),
            "fwd_faster_than_torch_compile": beyond(f, "normlab_v4", "torch_compile"),
            "fwd_bwd_frac_copy": frac(fb, "normlab_rms_norm"),
            "fwd_bwd_meets_70pct_copy": None if frac(fb, "normlab_rms_norm") is None else frac(fb, "normlab_rms_norm") >= 0.7,
            "triton_fwd_frac_copy": frac(f, "triton_rms_norm"),
            "triton_fwd_bwd_frac_copy": frac(fb, "triton_rms_norm"),
        }
    s["rms_over_ln_speedup_fwd"] = {
        dn: {k: _ratio(v["forward"].get("normlab_layer_norm"), v["forward"].get("normlab_v4"))
             for k, v in by.items() if "forward" in v} for dn, by in results.items()}
    s["F_rms_over_F_ln_speedup_fwd"] = {
        dn: {k: _ratio(v["forward"].get("F_layer_norm"), v["forward"].get("F_rms_norm"))
             for k, v in by.items() if "forward" in v} for dn, by in results.items()}
    if "bfloat16" in results and "float32" in results:
        s["bf16_over_fp32_speedup_fwd"] = {
            k: _ratio(results["float32"][k].get("forward", {}).get("normlab_v4"), v.get("forward", {}).get("normlab_v4"))
            for k, v in results["bfloat16"].items() if k in results["float32"]}
    # Triton against the peers: ratio > 1 means the peer took longer; beyond_spread as _beyond_spread
    tri: dict = {}
    for dn, by in results.items():
        for key, modes in by.items():
            for mode in ("forward", "forward_backward"):
                g = modes.get(mode, {})
                if "triton_rms_norm" not in g:
                    continue
                t = g["triton_rms_norm"]
                for peer in ("liger_rms_norm", "torch_compile", "F_rms_norm", "normlab_v4", "normlab_rms_norm"):
                    if peer in g:
                        tri.setdefault(dn, {}).setdefault(key, {}).setdefault(mode, {})[peer] = {
                            "peer_ms_over_triton_ms": _ratio(g[peer], t),
                            "triton_faster_beyond_spread": _beyond_spread(t, g[peer]),
                            "peer_faster_beyond_spread": _beyond_spread(g[peer], t)}
    s["triton_vs_peers"] = tri
    return s
