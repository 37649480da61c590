"""What the page shows from a run: the tables (Markdown cells kept in the data file), status text and plots."""
from __future__ import annotations

from pathlib import Path

from .analyse import index_results
from .cases import CEILINGS, COLORS, IMPLS, LABELS, OUT_MODE_ALLOCATOR


def _gb(rec) -> str:
    if rec is None:
        return "n/a"
    return f"{rec['gbps']:.1f} ({rec['gbps_min']:.1f}-{rec['gbps_max']:.1f})"


def _cmp(comparisons, **key) -> str:
    for c in comparisons:
        if all(c[k] == v for k, v in key.items()):
            return f"{c['label']}, {c['ratio']:.2f}x ({c['ratio_low']:.2f}-{c['ratio_high']:.2f})"
    return "n/a"


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def tables(idx, comparisons, tg, allocators, shapes, dtypes) -> dict:
    """The Performance page's tables, rendered from the records (GB/s: median (min-max) over all calls;
    comparisons: label, speed ratio t_other / t_ours (lowest-highest over the rounds))."""
    o = OUT_MODE_ALLOCATOR
    rows = []
    for dn in dtypes:
        for r, d in shapes:
            g = lambda impl, mode="forward_out", a=o: idx.get((a, mode, dn, r, d, impl))  # noqa: E731
            fr = g("fused_rms_norm")
            rows.append([dn, f"{r}x{d}", _gb(g("copy")), _gb(g("stream_copy")), _gb(fr),
                         f"{fr['ratio_copy']:.2f}" if fr and "ratio_copy" in fr else "n/a",
                         _gb(g("compiled_rms_norm")), _gb(g("ort_rms_normalization")),
                         _gb(g("ort_simplified_layer_norm")),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="ort_rms_normalization"),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="compiled_rms_norm")])
    out = {"forward_out": _md(["dtype", "rows x d", "copy_ (ceiling)", "streaming copy", "fused_rms_norm(out=)",
                               "/ copy", "torch.compile (out)", "ORT RMSNormalization", "ORT SimplifiedLayerNorm",
                               "fused vs ORT RMSNormalization", "fused vs torch.compile"], rows)}
    rows = []
    for dn in dtypes:
        for r, d in shapes:
            g = lambda impl, mode="forward_out", a=o: idx.get((a, mode, dn, r, d, impl))  # noqa: E731
            rows.append([dn, f"{r}x{d}", _gb(g("fused_layer_norm")), _gb(g("ort_layer_normalization")),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_layer_norm", b="ort_layer_normalization"),
                         _cmp(comparisons, allocator=o, mode="forward_out", dtype=dn, rows=r, hidden=d,
                              a="fused_rms_norm", b="fused_layer_norm")])
    out["forward_out_layer_norm"] = _md(["dtype", "rows x d", "fused_layer_norm(out=)", "ORT LayerNormalization",
                                         "fused vs ORT", "fused RMSNorm vs fused LayerNorm"], rows)
    for mode, impls in (("forward_alloc", ("clone", "fused_rms_norm", "F.rms_norm", "compiled_rms_norm",
                                           "ort_rms_normalization")),
                        ("forward_backward", ("fused_rms_norm", "F.rms_norm", "compiled_rms_norm", "fused_layer_norm",
                                              "F.layer_norm"))):
        rows = []
        for a in allocators:
            for dn in dtypes:
                for r, d in shapes:
                    recs = [idx.get((a, mode, dn, r, d, i)) for i in impls]
                    flt = recs[0]["minflt_per_call"] if recs[0] else None
                    rows.append([a, dn, f"{r}x{d}", *[_gb(x) for x in recs],
                                 _cmp(comparisons, allocator=a, mode=mode, dtype=dn, rows=r, hidden=d,
                                      a="fused_rms_norm", b="compiled_rms_norm")]
                                + ([f"{flt:.0f}" if flt is not None else "n/a"] if mode == "forward_alloc" else []))
        head = ["allocator", "dtype", "rows x d", *[LABELS[i] for i in impls], "fused vs torch.compile"]
        out[mode] = _md(head + (["page faults per clone()"] if mode == "forward_alloc" else []), rows)
    rows = []
    for dn in dtypes:
        t = tg[dn]
        for name, label in (("forward_out_vs_copy", "forward into a reused buffer >= 0.9x the reused-buffer copy"),
                            ("forward_out_vs_ort_rms_normalization", "forward (reused buffer) vs ORT RMSNormalization"),
                            ("forward_out_vs_ort_simplified_layer_norm", "forward (reused buffer) vs ORT SimplifiedLayerNormalization"),
                            ("forward_out_ln_vs_ort_layer_normalization", "LayerNorm forward (reused buffer) vs ORT LayerNormalization")):
            rows.append([label, dn, *_target_cells(t[name])])
        for mode, label in (("forward_alloc", "allocating forward vs torch.compile"),
                            ("forward_backward", "forward+backward vs torch.compile")):
            for a in allocators:
                rows.append([f"{label} ({a})", dn, *_target_cells(t[f"{mode}_vs_compile"][a])])
    out["targets"] = _md(["target", "dtype", "shapes meeting it", "worst ratio (shape)", "short by",
                          "separated from noise"], rows)
    out["forward_backward_traffic"] = _traffic_table(idx, comparisons, allocators, shapes, dtypes)
    return out


def _traffic_table(idx, comparisons, allocators, shapes, dtypes) -> str:
    """Forward+backward per shape against the copy ceiling and against the traffic twin (the same 5 N b moved
    by a copy and an add into reused buffers): where the twin itself falls short of the copy, the shortfall
    belongs to the traffic (three streams at once, a cache-resident shape), not to the norm's arithmetic."""
    a = "glibc_tunables" if "glibc_tunables" in allocators else "glibc"
    rows = []
    for dn in dtypes:
        for r, d in shapes:
            copy = idx.get((OUT_MODE_ALLOCATOR, "forward_out", dn, r, d, "copy"))
            g = lambda impl: idx.get((a, "forward_backward", dn, r, d, impl))  # noqa: E731
            twin = g("traffic_twin")

            def ratio(rec, base):
                return f"{rec['gbps'] / base['gbps']:.2f}" if rec and base else "n/a"
            rows.append([dn, f"{r}x{d}", ratio(twin, copy), ratio(g("fused_rms_norm"), copy),
                         ratio(g("fused_rms_norm"), twin), ratio(g("fused_layer_norm"), copy),
                         ratio(g("fused_layer_norm"), twin),
                         _cmp(comparisons, allocator=a, mode="forward_backward", dtype=dn, rows=r, hidden=d,
                              a="fused_layer_norm", b="compiled_layer_norm")])
    return _md(["dtype", "rows x d", "traffic twin / copy", "fused RMSNorm / copy", "fused RMSNorm / twin",
                "fused LayerNorm / copy", "fused LayerNorm / twin", "fused LayerNorm vs torch.compile"], rows)


def _target_cells(t: dict) -> list[str]:
    if not t["shapes"]:
        return ["not measured", "n/a", "n/a", "n/a"]
    return [f"{t['met']} of {t['shapes']} (threshold {t['threshold']:g})", f"{t['worst']:.2f} ({t['worst_shape']})",
            f"{t['missed_by']:.2f}", f"{t['separated_faster']} of {t['shapes']} shapes"]



def ort_table(support: dict, dtypes) -> str:
    return _md(["ONNX Runtime op (CPU)", *dtypes], [
        [op, *[("runs" if v[dn]["supported"] else "no CPU kernel: " + v[dn]["detail"].replace("unavailable: ONNX Runtime: ", "")[:90])
               if dn in v else "not tried" for dn in dtypes]] for op, v in support.items()])


def status_text(data: dict) -> dict:
    """The line the page opens with: a smoke run says so; a measurement names its load and spread rule."""
    ld = data["load"]
    if data["provenance"]["quick"]:
        return {"title": "Smoke run, not a measurement",
                "text": ("These figures come from `--quick`: one tiny shape, one call per implementation, on a "
                         "machine that may have been busy. They show that the command and this page work; the "
                         "numbers say nothing about speed. The measurement is `python -m reference_impl.studies.bench`.")}
    busy = (f" The machine was busy (1-minute load {ld['load_at_start']:.2f} > {ld['max_load']}) and the run was "
            "forced: read the spreads." if ld["forced"] else "")
    return {"title": "Measured",
            "text": (f"{data['settings']['repeats']} rounds per configuration, implementations interleaved; 1-minute "
                     f"load {ld['load_at_start']:.2f} at the start (limit {ld['max_load']}).{busy}")}


def first_touch_table(ft: dict) -> str:
    rows = []
    for a, v in ft.items():
        c = v["cases"]
        rows.append([a, *[f"{c[k]['gbps']:.1f}" for k in ("copy_reused", "copy_fresh_pretouched", "clone", "empty_then_write")],
                     f"{c['clone']['minflt_per_call']:.0f} of {v['pages_4k']}"])
    return _md(["allocator", "copy_ into a reused buffer (GB/s)", "copy_ into a fresh, pre-touched buffer",
                "clone()", "torch.empty + one write", "page faults per clone() (of 4 KiB pages)"], rows)



def _bars(theme, idx, panels, shapes, impls, labels, colors, xlabel, title, value="gbps"):
    """Horizontal bars, one panel per (mode, allocator, dtype) in ``panels``, one slot per implementation
    (fixed, so an absent one leaves a gap); whiskers min-max for GB/s, the rounds' range for ratios."""
    from reference_impl.studies import plotstyle

    per_panel = 0.22 * len(shapes) * len(impls) + 0.9
    fig, axes = plotstyle.figure(per_panel * len(panels) + 0.35 * len(impls) + 0.6, nrows=len(panels))
    height = 0.8 / max(1, len(impls))
    for n, (row, (src, dname)) in enumerate(zip(axes, panels)):
        ax = row[0]
        for j, impl in enumerate(impls):
            ys, xs, lo, hi = [], [], [], []
            for i, (r, d) in enumerate(shapes):
                rec = src(dname, r, d, impl)
                if rec and rec.get(value) is not None:
                    scale = rec[value] / rec["gbps"]
                    ys.append(i + j * height)
                    xs.append(rec[value])
                    lo.append((rec["gbps"] - rec["gbps_min"]) * scale)
                    hi.append((rec["gbps_max"] - rec["gbps"]) * scale)
            if ys:
                ax.barh(ys, xs, height, xerr=[lo, hi], capsize=1.5, label=labels[impl] if n == 0 else None,
                        ecolor=plotstyle.THEMES[theme]["text"],  # the text colour: black bars vanish on the dark page
                        color=colors[impl], hatch="//" if impl in CEILINGS else None,
                        edgecolor=plotstyle.muted(theme) if impl in CEILINGS else None, linewidth=0.4)
        ax.set_yticks([i + 0.4 - height / 2 for i in range(len(shapes))], [f"{r}x{d}" for r, d in shapes])
        ax.invert_yaxis()
        ax.set_xlabel(xlabel)
        ax.set_title(title(dname))
        ax.grid(True, axis="x", alpha=0.5)
        if value == "ratio_copy":
            ax.axvline(1.0, color=plotstyle.muted(theme), linewidth=1.0, linestyle="--")
    # above the panels: a figure taller than a screen would hide a legend below it from the first panel
    fig.legend(loc="outside upper center", ncols=1)
    return fig


def plot(data: dict, out_dir: Path) -> list[str]:
    """GB/s of every implementation per shape, horizontal bars (one panel per dtype, stacked), light and dark,
    narrow with large text so that they read on a phone (reference_impl/studies/plotstyle.py); the
    short-row group with its tile settings; and the page's opening plot, every line's ratio to the copy."""
    from reference_impl.studies import plotstyle

    from .groups import GROUP_COLORS, GROUP_IMPLS, GROUP_LABELS

    shapes = [tuple(s) for s in data["settings"]["shapes"]]
    idx = index_results(data["results"])
    quick = "smoke run: " if data["provenance"]["quick"] else ""
    dtypes = data["settings"]["dtypes"]
    labels, colors = {**LABELS, **GROUP_LABELS}, {**COLORS, **GROUP_COLORS}
    written = []
    for mode, alloc in (("forward_out", OUT_MODE_ALLOCATOR), ("forward_alloc", "glibc"),
                        ("forward_alloc", "jemalloc_retain"), ("forward_backward", "glibc")):
        if not any(k[0] == alloc and k[1] == mode for k in idx):
            continue
        src = lambda dn, r, d, impl, m=mode, a=alloc: idx.get((a, m, dn, r, d, impl))  # noqa: E731
        written += plotstyle.save(lambda theme, m=mode, a=alloc, src=src: _bars(
            theme, idx, [(src, dn) for dn in dtypes], shapes, list(IMPLS[m]), labels, colors,
            "GB/s, median; whiskers: min-max", lambda dn: f"{quick}{dn}, {m.replace('_', ' ')}, {a}"),
            f"cpu_{mode}_{alloc}", out_dir)
    short = [tuple(s) for s in data["settings"].get("short_shapes", [])]
    if short and any(k[1] == "short_rows" for k in idx):
        src = lambda dn, r, d, impl: idx.get((OUT_MODE_ALLOCATOR, "short_rows", dn, r, d, impl))  # noqa: E731
        tile = data["settings"]["tile_default_bytes"]
        lab = {**labels, "fused_rms_norm": f"this op, tile {tile} B (default)", "F.rms_norm": "F.rms_norm (allocating)",
               "fused_rms_norm_avx512": "this op, no BF16 instructions"}
        written += plotstyle.save(lambda theme: _bars(
            theme, idx, [(src, dn) for dn in dtypes], short, list(GROUP_IMPLS["short_rows"]), lab, colors,
            "GB/s, median; whiskers: min-max", lambda dn: f"{quick}{dn}, short rows, reused buffer"),
            "cpu_short_rows", out_dir)
    written += plotstyle.save(lambda theme: answer_plot(theme, data, idx, short, labels, colors), "cpu_answer", out_dir)
    return written


def answer_plot(theme, data, idx, short, labels, colors):
    """Every line's speed as a fraction of the copy of the same bytes into a reused buffer (1 = the copy),
    per shape: the main shapes' forward into a reused buffer (F.rms_norm: allocating, glibc), then the
    short rows."""
    shapes = [tuple(s) for s in data["settings"]["shapes"]] + short
    short_set = set(short)

    def src(dn, r, d, impl):
        if (r, d) in short_set:
            return idx.get((OUT_MODE_ALLOCATOR, "short_rows", dn, r, d, impl))
        mode = "forward_alloc" if impl == "F.rms_norm" else "forward_out"
        return idx.get(("glibc" if impl == "F.rms_norm" else OUT_MODE_ALLOCATOR, mode, dn, r, d, impl))

    quick = "smoke run: " if data["provenance"]["quick"] else ""
    impls = ["fused_rms_norm", "compiled_rms_norm", "F.rms_norm", "ort_rms_normalization"]
    lab = {**labels, "F.rms_norm": "F.rms_norm (eager, allocating)"}
    return _bars(theme, idx, [(src, dn) for dn in data["settings"]["dtypes"]], shapes, impls, lab, colors,
                 "fraction of the copy's speed (dashed: 1)", lambda dn: f"{quick}{dn}, forward", value="ratio_copy")
