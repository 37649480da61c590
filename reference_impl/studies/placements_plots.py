"""Plots of the placements study (:mod:`reference_impl.studies.placements`): each in a light and a dark
variant, transparent, with text that stays at least 11 px tall when the plot is shown 360 px wide."""
from __future__ import annotations

from pathlib import Path

import numpy as np


PLOT_WIDTH_IN = 4.8      # at 360 px on screen an 11 pt label is 360 / (4.8 * 72) * 11 = 11.5 px tall
FONT_PT = 12
THEME_TEXT = {"": "#1f2328", "-dark": "#e6edf3"}       # the diagrams' foreground colours
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def plots(res: dict, out_dir: Path) -> list[str]:
    """Each plot twice: ``name.svg`` (text for the light page) and ``name-dark.svg``; transparent background."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "placements", "font.size": FONT_PT,
                                "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT,
                                "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT})
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def figure(height):
        return plt.subplots(figsize=(PLOT_WIDTH_IN, height))

    from matplotlib.ticker import FuncFormatter, NullFormatter

    def plain_log(axis):
        # tick labels as plain numbers: matplotlib's 10^k labels set the exponent in a smaller font
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())

    def finish_plot(fig, ax, name, fg):
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                plain_log(axis)
        for s in ax.spines.values():
            s.set_color(fg)
        ax.tick_params(colors=fg)
        ax.xaxis.label.set_color(fg)
        ax.yaxis.label.set_color(fg)
        ax.title.set_color(fg)
        ax.grid(True, alpha=0.25, color=fg)
        ax.set_facecolor("none")
        leg = ax.get_legend()
        if leg:
            leg.get_frame().set_alpha(0)
            for t in leg.get_texts():
                t.set_color(fg)
        fig.tight_layout()
        fig.savefig(out_dir / name, transparent=True, metadata={"Date": None})
        plt.close(fig)
        written.append(name)

    for suffix, fg in THEME_TEXT.items():
        pl = res["placements"]
        keys = [k for k, e in pl.items() if not e["qk_norm"]]  # the study's order, without QK-norm
        fig, ax = figure(4.2)
        for j, qk in enumerate(("", "+qk")):
            for i, k in enumerate(keys):
                vals = [v for v in pl[k + qk]["final"]["values"] if v is not None]
                ax.scatter([v for v in vals], [i + (0.18 if qk else -0.18)] * len(vals), s=18,
                           color=PALETTE[1] if qk else PALETTE[0], label=(("with" if qk else "without") + " QK-norm")
                           if i == 0 else None, zorder=3)
        ax.set_yticks(range(len(keys)), [pl[k]["label"].replace(" (OLMo 2)", "") for k in keys])
        ax.invert_yaxis()
        ax.set_xlabel("validation loss (nats/byte), each dot a seed")
        ax.legend(loc="upper right")
        finish_plot(fig, ax, f"placements_final{suffix}.svg", fg)

        sw = res["lr_sweep"]
        for what, ylabel, name in (("final", "final validation loss", "lr_loss"),
                                   ("max_attn_logit", "largest attention logit", "lr_logit")):
            fig, ax = figure(3.4)
            for side, color in (("no_qk_norm", PALETTE[0]), ("qk_norm", PALETTE[1])):
                e = sw["sides"][side]
                by_lr = sorted(e["by_lr"].values(), key=lambda s: s["lr"])
                lrs = [s["lr"] for s in by_lr]
                st_ = [s[what] for s in by_lr]
                ok = [i for i, s in enumerate(st_) if s["n_finite"]]
                ax.plot([lrs[i] for i in ok], [st_[i]["mean"] for i in ok], color=color, label=e["label"], marker="o", ms=4)
                ax.fill_between([lrs[i] for i in ok], [st_[i]["min"] for i in ok], [st_[i]["max"] for i in ok],
                                color=color, alpha=0.2, lw=0)
            ax.set_xscale("log")
            if what == "max_attn_logit":
                ax.set_yscale("log")
            ax.set_xlabel("peak learning rate")
            ax.set_ylabel(ylabel)
            ax.legend()
            finish_plot(fig, ax, f"placements_{name}{suffix}.svg", fg)

        fig, ax = figure(3.4)
        g = res["init_gradients"]
        for key, color in (("post", PALETTE[1]), ("pre", PALETTE[0])):
            for j, r in enumerate(g[key]["runs"]):
                ax.plot(range(1, len(r["mlp_out_weight"]) + 1), r["mlp_out_weight"], color=color, alpha=0.8,
                        label=g[key]["label"] if j == 0 else None)
        ax.set_yscale("log")
        ax.set_xlabel("block (1 = next to the embeddings)")
        ax.set_ylabel("gradient norm at init")
        ax.legend()
        finish_plot(fig, ax, f"placements_init_gradients{suffix}.svg", fg)

        fig, ax = figure(3.4)
        d = res["depth_variance"]
        for key, color in (("pre", PALETTE[0]), ("peri", PALETTE[2])):
            for j, r in enumerate(d[key]["runs"]):
                v = r["layer_variance"]
                ax.plot(range(1, len(v)), [x if x is not None else np.nan for x in v[1:]], color=color, alpha=0.8,
                        label=d[key]["label"] if j == 0 else None)
        ax.set_yscale("log")
        ax.set_xlabel("output of block")
        ax.set_ylabel("hidden-state variance")
        ax.legend()
        finish_plot(fig, ax, f"placements_depth_variance{suffix}.svg", fg)
    return written


