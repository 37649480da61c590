"""RMSNorm against LayerNorm in training: ``python -m reference_impl.studies.training [--quick]``.

Trains the small decoder of :mod:`reference_impl.tiny_lm` on bytes of English text that ships with every
Python (the documentation topics of ``pydoc_data/topics.py``, PSF licence), with a held-out validation
split of whole topics, and writes ``docs/data/training.json`` with SVG plots under ``docs/data/plots/``:

- ``main``: norm in {RMSNorm, LayerNorm} x placement in {Pre, Post} (and RMSNorm on the sub-layer output),
  several seeds each, validation loss at equal steps and at equal training time, step time;
- ``timing``: step time with the norms and with the norms replaced by the identity, interleaved; the
  difference is the norms' share;
- ``warmup``: Pre- and Post-LN with and without learning-rate warm-up at large learning rates (Xiong et al.
  2020, arXiv:2002.04745);
- ``deep``: a deep Pre-RMSNorm stack with the norm gains started at 1 and at 0.1;
- ``comparisons``: each pairwise comparison with mean, seed range and ``separated`` (the seed ranges do not
  overlap): the page says "lower" only where that holds.

It also writes ``docs/data/training_equivalence.json`` (:func:`reference_impl.equivalence.report`).
``--quick`` runs a tiny model for a few steps (seconds): a smoke test of the pipeline, flagged
``"quick": true``, whose numbers say nothing about the norms.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import equivalence
from . import training_machines
from .machine import cpu_identity, machine_key
from ..provenance import check_out, finish, python_closure, record, write_json
from ..norms import model_layers
from ..tiny_lm import TinyLM, TinyLMConfig, parameter_count, without_norms
from ..tiny_lm import sources as tiny_lm_sources

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
COMMAND = "python -m reference_impl.studies.training"
THREADS = 2
LABELS = {"pre-rms": "Pre-RMSNorm", "pre-ln": "Pre-LN", "post-rms": "Post-RMSNorm", "post-ln": "Post-LN",
          "out-rms": "RMSNorm on sub-layer output"}
COLORS = {"pre-rms": "#1f77b4", "pre-ln": "#ff7f0e", "post-rms": "#2ca02c", "post-ln": "#d62728",
          "out-rms": "#9467bd"}


@dataclass
class Settings:
    model: dict                      # TinyLMConfig fields shared by the main runs (not norm, placement)
    batch: int
    steps: int
    eval_every: int
    eval_windows: int
    lr: float
    warmup: int
    seeds: list
    configs: list                    # "placement-norm" keys of the main study
    warmup_lrs: list                 # the warm-up study: Pre/Post-LN, with and without warm-up, at these
    warmup_steps: int
    deep: dict                       # model changes of the deep study
    deep_steps: int
    deep_gains: list
    timing_repeats: int
    timing_steps: int
    quick: bool = False
    grad_steps: int = field(default=50)   # per-step gradient norms are kept for the first steps


FULL = Settings(model=dict(d=64, layers=4, heads=4, ffn=176, context=64), batch=16, steps=500, eval_every=25,
                eval_windows=128, lr=1e-3, warmup=50, seeds=[0, 1, 2],
                configs=["pre-rms", "pre-ln", "post-rms", "post-ln", "out-rms"],
                warmup_lrs=[1e-3, 3e-3], warmup_steps=200, deep=dict(d=32, layers=32, heads=4, ffn=88),
                deep_steps=100, deep_gains=[1.0, 0.1], timing_repeats=7, timing_steps=5)
QUICK = Settings(model=dict(d=32, layers=2, heads=2, ffn=64, context=32), batch=4, steps=6, eval_every=3,
                 eval_windows=8, lr=1e-3, warmup=2, seeds=[0, 1],
                 configs=["pre-rms", "pre-ln", "post-rms", "post-ln", "out-rms"],
                 warmup_lrs=[1e-3, 3e-3], warmup_steps=4, deep=dict(d=16, layers=3, heads=2, ffn=32),
                 deep_steps=3, deep_gains=[1.0, 0.1], timing_repeats=2, timing_steps=2, quick=True, grad_steps=4)


# ------------------------------------------------------------------------------------------- the text


def load_corpus() -> tuple[torch.Tensor, torch.Tensor, dict]:
    """UTF-8 bytes of the Python documentation topics that ``help()`` shows, sorted by topic; every tenth
    topic (starting with the sixth) is held out for validation, so no text is shared between the splits."""
    from pydoc_data import topics

    keys = sorted(topics.topics)
    val_keys = keys[5::10]
    train = "\n\n".join(topics.topics[k] for k in keys if k not in val_keys).encode("utf-8")
    val = "\n\n".join(topics.topics[k] for k in val_keys).encode("utf-8")
    path = Path(topics.__file__)
    info = {
        "source": "pydoc_data/topics.py of the Python standard library (the text help() shows)",
        "python": sys.version.split()[0],
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "licence": "PSF License Agreement for Python (LICENSE.txt beside the standard library)",
        "topics": len(keys), "val_topics": val_keys,
        "train_bytes": len(train), "val_bytes": len(val),
        "train_sha256": hashlib.sha256(train).hexdigest()[:16], "val_sha256": hashlib.sha256(val).hexdigest()[:16],
    }
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).long()   # noqa: E731
    return as_tensor(train), as_tensor(val), info


def random_batch(data: torch.Tensor, batch: int, context: int, gen: torch.Generator):
    start = torch.randint(0, data.numel() - context - 1, (batch,), generator=gen)
    idx = start[:, None] + torch.arange(context + 1)
    chunk = data[idx]
    return chunk[:, :-1], chunk[:, 1:]


def val_windows(data: torch.Tensor, windows: int, context: int):
    """``windows`` evenly spaced windows over the validation text, the same for every run."""
    starts = torch.linspace(0, data.numel() - context - 2, windows).long()
    chunk = data[starts[:, None] + torch.arange(context + 1)]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def evaluate(model: TinyLM, val, batch: int) -> float:
    model.eval()
    x, y = val
    total = sum(float(model.loss(x[i:i + batch], y[i:i + batch])) * len(x[i:i + batch]) for i in range(0, len(x), batch))
    model.train()
    return total / len(x)


# ----------------------------------------------------------------------------------------- one run


# --8<-- [start:schedule]
def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps (none when 0), then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - 1 - warmup))
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
# --8<-- [end:schedule]


def train_run(cfg: TinyLMConfig, st: Settings, seed: int, data, lr: float, warmup: int, steps: int) -> dict:
    """One training run. Same seed, same initial weights (where shapes agree) and same batches whatever
    the norm. Training time counts only the training steps, not the evaluations."""
    train, val = data
    torch.manual_seed(seed)
    model = TinyLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(1000 + seed)
    out = {"seed": seed, "steps": [0], "time_s": [0.0], "val_loss": [evaluate(model, val, st.batch)],
           "grad_norm": [], "diverged": False}
    step_times, elapsed = [], 0.0
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        x, y = random_batch(train, st.batch, cfg.context, gen)
        t0 = time.perf_counter()
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        opt.step()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        elapsed += dt
        if step < st.grad_steps:
            out["grad_norm"].append(gnorm if math.isfinite(gnorm) else None)
        if not math.isfinite(float(loss.detach())):
            out["diverged"] = True
            break
        if (step + 1) % st.eval_every == 0 or step + 1 == steps:
            v = evaluate(model, val, st.batch)
            out["steps"].append(step + 1)
            out["time_s"].append(elapsed)
            out["val_loss"].append(v if math.isfinite(v) else None)
            if not math.isfinite(v):
                out["diverged"] = True
                break
    skip = min(3, len(step_times) - 1)                      # the first steps warm caches and allocators
    out["step_ms"] = 1e3 * float(np.median(step_times[skip:]))
    out["final_val_loss"] = None if out["diverged"] else out["val_loss"][-1]
    return out


def model_config(st: Settings, key: str, **changes) -> TinyLMConfig:
    placement, norm = key.split("-")
    return TinyLMConfig(**{**st.model, **changes}, norm=norm, placement=placement)


# --------------------------------------------------------------------------------- summaries, verdicts


def band(runs: list[dict], key: str = "val_loss") -> dict:
    """Mean, min and max over seeds at each evaluation step (steps where every seed has a value)."""
    n = min(len(r[key]) for r in runs)
    vals = [[r[key][i] for r in runs] for i in range(n)]
    ok = [all(v is not None for v in col) for col in vals]
    return {"steps": runs[0]["steps"][:n],
            "mean": [float(np.mean(c)) if k else None for c, k in zip(vals, ok)],
            "min": [float(np.min(c)) if k else None for c, k in zip(vals, ok)],
            "max": [float(np.max(c)) if k else None for c, k in zip(vals, ok)]}


def at_time(run: dict, t: float) -> float | None:
    """Validation loss at training time ``t`` (linear between evaluations); None past a divergence."""
    if run["diverged"] or t > run["time_s"][-1] + 1e-12:
        return None
    return float(np.interp(t, run["time_s"], run["val_loss"]))


def stats(values: list) -> dict:
    finite = [v for v in values if v is not None]
    out = {"values": values, "n": len(values), "n_finite": len(finite)}
    if finite:
        out.update(mean=float(np.mean(finite)), min=float(np.min(finite)), max=float(np.max(finite)))
    return out


# --8<-- [start:verdict]
def compare(a: list, b: list, label_a: str, label_b: str, what: str, fmt: str = ".3f") -> dict:
    """Compares per-seed values (lower is better; None = diverged). ``separated``: every seed of one
    side is below every seed of the other. Only then does the text name a winner."""
    sa, sb = stats(a), stats(b)
    res = {"a": label_a, "b": label_b, "what": what, "a_stats": sa, "b_stats": sb}
    if sa["n_finite"] < sa["n"] or sb["n_finite"] < sb["n"]:
        res.update(separated=sa["n_finite"] != sb["n_finite"], lower=label_a if sa["n_finite"] > sb["n_finite"] else label_b,
                   diff_mean=None)
        res["text"] = (f"{what}: {label_a} diverged in {sa['n'] - sa['n_finite']} of {sa['n']} seeds, "
                       f"{label_b} in {sb['n'] - sb['n_finite']} of {sb['n']}")
        if not res["separated"]:
            res["lower"] = None
        return res
    separated = sa["max"] < sb["min"] or sb["max"] < sa["min"]
    lower = (label_a if sa["mean"] < sb["mean"] else label_b) if separated else None
    res.update(separated=separated, lower=lower, diff_mean=sa["mean"] - sb["mean"])
    span = lambda s: f"{s['mean']:{fmt}} (seeds {s['min']:{fmt}} to {s['max']:{fmt}})"   # noqa: E731
    verdict = f"{lower} lower, the seeds separate" if separated else "the seed ranges overlap: no difference shown"
    res["text"] = f"{what}: {label_a} {span(sa)} against {label_b} {span(sb)}; {verdict}"
    return res
# --8<-- [end:verdict]


def main_comparisons(main: dict, configs: list) -> dict:
    pairs = [("pre-rms", "pre-ln"), ("post-rms", "post-ln"), ("pre-ln", "post-ln"), ("pre-rms", "post-rms"),
             ("pre-rms", "out-rms")]
    pairs = [p for p in pairs if p[0] in configs and p[1] in configs]
    out = {"equal_steps": {}, "equal_time": {}, "step_ms": {}, "perplexity": {}}
    for a, b in pairs:
        ra, rb = main[a]["runs"], main[b]["runs"]
        key = f"{a}_vs_{b}"
        la, lb = LABELS[a], LABELS[b]
        out["equal_steps"][key] = compare([r["final_val_loss"] for r in ra], [r["final_val_loss"] for r in rb],
                                          la, lb, "validation loss (nats per byte) at equal steps")
        ppl = lambda rs: [None if r["final_val_loss"] is None else math.exp(r["final_val_loss"]) for r in rs]  # noqa: E731
        out["perplexity"][key] = compare(ppl(ra), ppl(rb), la, lb, "per-byte perplexity at equal steps")
        t = min(r["time_s"][-1] for r in ra + rb)
        cmp = compare([at_time(r, t) for r in ra], [at_time(r, t) for r in rb], la, lb,
                      f"validation loss at equal training time ({t:.1f} s)")
        cmp["time_s"] = t
        out["equal_time"][key] = cmp
        out["step_ms"][key] = compare([r["step_ms"] for r in ra], [r["step_ms"] for r in rb], la, lb,
                                      "median step time (ms)", ".2f")
    return out


# ------------------------------------------------------------------------------------------ studies


def progress(msg: str, t0: float, done: int, total: int) -> None:
    el = time.monotonic() - t0
    eta = el / done * (total - done) if done else float("nan")
    print(f"[{done}/{total}] {msg}  elapsed {el:.0f} s, left ~{eta:.0f} s", file=sys.stderr, flush=True)


def run_main(st: Settings, data, t0, counter) -> dict:
    main = {k: {"label": LABELS[k], "config": model_config(st, k).to_dict(), "runs": []} for k in st.configs}
    for seed in st.seeds:                                 # seeds outermost: configurations interleave in time
        for key in st.configs:
            main[key]["runs"].append(train_run(model_config(st, key), st, seed, data, st.lr, st.warmup, st.steps))
            counter[0] += 1
            progress(f"main {key} seed {seed}", t0, counter[0], counter[1])
    for key in st.configs:
        runs = main[key]["runs"]
        main[key]["val_band"] = band(runs)
        main[key]["final"] = stats([r["final_val_loss"] for r in runs])
        main[key]["step_ms"] = stats([r["step_ms"] for r in runs])
        main[key]["parameters"] = parameter_count(TinyLM(model_config(st, key)))
    return main


def run_warmup(st: Settings, data, t0, counter) -> dict:
    out = {}
    for lr in st.warmup_lrs:
        res = {}
        for seed in st.seeds:
            for key in ("pre-ln", "post-ln"):
                for wu in (True, False):
                    name = f"{key}-{'warmup' if wu else 'no_warmup'}"
                    warm = max(1, st.warmup_steps // 4) if wu else 0
                    run = train_run(model_config(st, key), st, seed, data, lr, warm, st.warmup_steps)
                    res.setdefault(name, {"runs": []})["runs"].append(run)
                    counter[0] += 1
                    progress(f"warm-up lr {lr:g} {name} seed {seed}", t0, counter[0], counter[1])
        for name, v in res.items():
            v["val_band"] = band(v["runs"])
            v["final"] = stats([r["final_val_loss"] for r in v["runs"]])
        fin = lambda n: [r["final_val_loss"] for r in res[n]["runs"]]   # noqa: E731
        res["comparisons"] = {
            "post_warmup_vs_no_warmup": compare(fin("post-ln-warmup"), fin("post-ln-no_warmup"), "Post-LN with warm-up",
                                                "Post-LN without warm-up", f"final validation loss at lr {lr:g}"),
            "pre_warmup_vs_no_warmup": compare(fin("pre-ln-warmup"), fin("pre-ln-no_warmup"), "Pre-LN with warm-up",
                                               "Pre-LN without warm-up", f"final validation loss at lr {lr:g}"),
            "pre_vs_post_no_warmup": compare(fin("pre-ln-no_warmup"), fin("post-ln-no_warmup"), "Pre-LN",
                                             "Post-LN", f"final validation loss without warm-up at lr {lr:g}"),
        }
        out[f"lr_{lr:.0e}"] = {"lr": lr, "warmup_steps": max(1, st.warmup_steps // 4), **res}
    return out


def run_deep(st: Settings, data, t0, counter) -> dict:
    out = {}
    for seed in st.seeds:
        for gain in st.deep_gains:
            cfg = model_config(st, "pre-rms", **st.deep, gain_init=gain)
            run = train_run(cfg, st, seed, data, st.lr, st.warmup, st.deep_steps)
            out.setdefault(f"gain_{gain:g}".replace(".", "p"), {"gain": gain, "config": cfg.to_dict(), "runs": []})["runs"].append(run)
            counter[0] += 1
            progress(f"deep gain {gain:g} seed {seed}", t0, counter[0], counter[1])
    for v in out.values():
        v["val_band"] = band(v["runs"])
        v["final"] = stats([r["final_val_loss"] for r in v["runs"]])
        v["max_grad_norm_early"] = stats([max((g for g in r["grad_norm"] if g is not None), default=None) for r in v["runs"]])
    keys = [f"gain_{g:g}".replace(".", "p") for g in st.deep_gains]
    if len(keys) == 2:
        a, b = (out[k]["runs"] for k in keys)
        out["comparison"] = compare([r["final_val_loss"] for r in a], [r["final_val_loss"] for r in b],
                                    f"gain {st.deep_gains[0]:g}", f"gain {st.deep_gains[1]:g}",
                                    f"final validation loss of a {st.deep['layers']}-layer Pre-RMSNorm model")
    return out


def _time_steps(model, opt, batch, n: int) -> float:
    x, y = batch
    t0 = time.perf_counter()
    for _ in range(n):
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / n


def dispatched_ops(norm: str, d: int, rows: int) -> dict:
    """The aten operations one forward and one backward of the torch norm module run, as they reach the
    kernels (a dispatch mode logs them): one fused kernel, or several separate passes over memory."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    module = model_layers()[norm].layer.build(d, 1e-5)        # the tiny decoder's own layer
    x = torch.randn(rows, d, requires_grad=True)
    with Log() as fwd:
        y = module(x)
    dy = torch.randn_like(y)
    with Log() as bwd:
        y.backward(dy)
    skip = {"detach", "t", "view", "_unsafe_view", "as_strided", "expand", "unsqueeze", "squeeze", "alias"}
    keep = lambda ops: [o for o in ops if o not in skip]   # noqa: E731  (metadata-only ops move no data)
    return {"forward": keep(fwd.ops), "backward": keep(bwd.ops)}


def run_timing(st: Settings, data) -> dict:
    """Per configuration, one training step (forward, backward, AdamW) of the model and of its copy with
    the norms replaced by the identity, on the same batch; repeats interleave every variant, with the
    order rotated each repeat. share = 1 - t(identity) / t(model), per repeat."""
    gen = torch.Generator().manual_seed(0)
    batch = random_batch(data[0], st.batch, st.model["context"], gen)
    variants = {}
    for key in st.configs:
        torch.manual_seed(0)
        m = TinyLM(model_config(st, key))
        for name, model in ((key, m), (key + "/identity", without_norms(m))):
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            _time_steps(model, opt, batch, 2)
            variants[name] = (model, opt, [])
    names = list(variants)
    for rep in range(st.timing_repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            model, opt, times = variants[name]
            times.append(_time_steps(model, opt, batch, st.timing_steps))
    out = {}
    for key in st.configs:
        with_n, without = np.array(variants[key][2]), np.array(variants[key + "/identity"][2])
        share = 1 - without / with_n
        out[key] = {"step_ms": stats(list(1e3 * with_n)), "identity_step_ms": stats(list(1e3 * without)),
                    "share": stats(list(share)), "median_share": float(np.median(share)),
                    "median_step_ms": float(np.median(with_n) * 1e3),
                    "median_identity_step_ms": float(np.median(without) * 1e3)}
    if "pre-rms" in out and "pre-ln" in out:
        diff = 1 - np.array(variants["pre-rms"][2]) / np.array(variants["pre-ln"][2])
        med, sep = float(np.median(diff)), bool(diff.min() > 0 or diff.max() < 0)
        how = f"{abs(med):.1%} {'less' if med > 0 else 'more'} time than a Pre-LN step"
        span = f"repeats from {diff.min():.1%} to {diff.max():.1%} saved"
        out["pre_rms_time_saving_vs_ln"] = {
            **stats(list(diff)), "median": med, "separated": sep,
            "text": f"a Pre-RMSNorm training step takes {how} (median; {span}; "
                    + ("every repeat agrees on the sign)" if sep else "the repeats disagree on the sign: no difference shown)")}
    rows = st.batch * st.model["context"]
    out["dispatched_ops"] = {n: dispatched_ops(n, st.model["d"], rows) for n in ("rms", "ln")}
    return out


# -------------------------------------------------------------------------------------------- plots


def _style(ax, xlabel, ylabel):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.5)


def _band(ax, x, b, color, label):
    ok = [i for i, m in enumerate(b["mean"]) if m is not None]
    xs = [x[i] for i in ok]
    ax.plot(xs, [b["mean"][i] for i in ok], color=color, label=label, lw=1.6)
    ax.fill_between(xs, [b["min"][i] for i in ok], [b["max"][i] for i in ok], color=color, alpha=0.2, lw=0)


def plots(data: dict, out_dir: Path) -> list[str]:
    """Validation curves (mean line, band = min to max over seeds), warm-up, step time, deep stack; light and
    dark, drawn narrow with large text so that they read on a phone (reference_impl/studies/plotstyle.py)."""
    from reference_impl.studies import plotstyle

    main = data["main"]

    def curves(theme):
        fig, axs = plotstyle.figure(7.6, nrows=2)
        a1, a2 = axs[0][0], axs[1][0]
        for key, v in main.items():
            b = v["val_band"]
            _band(a1, b["steps"], b, COLORS[key], v["label"])
            t = np.mean([r["time_s"][:len(b["steps"])] for r in v["runs"]], axis=0)   # mean time of each eval
            _band(a2, list(t), b, COLORS[key], None)
        _style(a1, "training step", "val. loss (nats/byte)")
        _style(a2, "training time (s)", "val. loss (nats/byte)")
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    wu = data["warmup"]

    def warmup(theme):
        fig, axes = plotstyle.figure(3.2 * len(wu) + 1.2, nrows=len(wu))
        for k, (ax, (name, v)) in enumerate(zip((row[0] for row in axes), wu.items())):
            for key, color in (("pre-ln", COLORS["pre-ln"]), ("post-ln", COLORS["post-ln"])):
                for suffix, ls in (("warmup", "-"), ("no_warmup", "--")):
                    b = v[f"{key}-{suffix}"]["val_band"]
                    label = f"{LABELS[key]}, {'warm-up' if suffix == 'warmup' else 'no warm-up'}" if k == 0 else None
                    _band(ax, b["steps"], b, color, label)
                    ax.lines[-1].set_linestyle(ls)
            ax.set_title(f"peak learning rate {v['lr']:g}")
            _style(ax, "training step", "val. loss")
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    tm = data["timing"]
    keys = [k for k in main if k in tm]

    def step_time(theme):
        fig, axs = plotstyle.figure(0.55 * len(keys) + 1.8)
        ax = axs[0][0]
        ys = np.arange(len(keys))
        ax.barh(ys - 0.2, [tm[k]["median_step_ms"] for k in keys], 0.4, color=[COLORS[k] for k in keys],
                label="with norms")
        ax.barh(ys + 0.2, [tm[k]["median_identity_step_ms"] for k in keys], 0.4, color=plotstyle.muted(theme),
                alpha=0.6, label="norms replaced by identity")
        ax.set_yticks(ys, [LABELS[k].replace(" on sub-layer output", " (out)") for k in keys])
        ax.invert_yaxis()
        _style(ax, "training step (ms), median", "")
        fig.legend(loc="outside lower center", ncols=1)
        return fig

    deep = {k: v for k, v in data["deep"].items() if k.startswith("gain_")}

    def deep_stack(theme):
        fig, axs = plotstyle.figure(7.2, nrows=2)
        a1, a2 = axs[0][0], axs[1][0]
        for (name, v), color in zip(deep.items(), plotstyle.CYCLE):
            _band(a1, v["val_band"]["steps"], v["val_band"], color, f"gain starts at {v['gain']:g}")
            g = np.array([[x if x is not None else np.nan for x in r["grad_norm"]] for r in v["runs"]], dtype=float)
            a2.plot(np.arange(1, g.shape[1] + 1), np.nanmean(g, axis=0), color=color)
        _style(a1, "training step", "val. loss")
        _style(a2, "training step", "gradient norm")
        fig.legend(loc="outside lower center", ncols=2)
        return fig

    written = []
    for draw, name in ((curves, "training_curves"), (warmup, "training_warmup"), (step_time, "training_step_time"),
                       (deep_stack, "training_deep")):
        written += plotstyle.save(draw, name, out_dir)
    return written


# --------------------------------------------------------------------------------------------- main


def status_text(quick: bool, prov: dict) -> str:
    if quick:
        return ("These numbers come from a smoke run (--quick: a tiny model trained for a few steps). They show "
                "that the pipeline works; they say nothing about how the norms compare. The full study replaces them.")
    return (f"Measured on {prov['machine']['cpu']} with {THREADS} threads, load average "
            f"{prov['load_avg'][0]:.2f} at the start and {prov['load_avg_end'][0]:.2f} at the end, "
            f"in {prov['duration_s'] / 60:.1f} minutes.")


def run(st: Settings, out_dir: Path, plot_dir: Path, equivalence_report: bool = True) -> dict:
    torch.set_num_threads(THREADS)
    sources = tiny_lm_sources("reference_impl/studies/training.py")
    cmd = COMMAND + (" --quick" if st.quick else "")
    prov = record(cmd, sources, quick=st.quick, packages=("torch", "numpy", "transformers", "matplotlib"),
                  machine_extra={"torch_threads": THREADS, "cpu_identity": (ident := cpu_identity()),
                                 "machine_key": machine_key(ident)})
    train, val, corpus = load_corpus()
    data = (train, val_windows(val, st.eval_windows, st.model["context"]))
    n_warm = len(st.warmup_lrs) * len(st.seeds) * 4
    counter = [0, len(st.seeds) * (len(st.configs) + len(st.deep_gains)) + n_warm]
    t0 = time.monotonic()
    result = {"quick": st.quick, "settings": asdict(st), "corpus": corpus}
    result["timing"] = run_timing(st, data)
    result["main"] = run_main(st, data, t0, counter)
    result["comparisons"] = main_comparisons(result["main"], st.configs)
    result["warmup"] = run_warmup(st, data, t0, counter)
    result["deep"] = run_deep(st, data, t0, counter)
    finish(prov)
    result = {"provenance": prov, "status_text": status_text(st.quick, prov),
              "status_short": ("smoke-run numbers, to be replaced by the full study" if st.quick else
                               f"{len(st.seeds)} seeds per configuration, {st.steps} steps"), **result}
    result["plots"] = plots(result, plot_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "training.json", result, allow_nan=False)
    if not equivalence_report:
        return result
    eq_prov = record(COMMAND, python_closure("reference_impl/equivalence.py"), quick=False,
                     packages=("torch", "transformers"))
    eq = equivalence.report()
    finish(eq_prov)
    write_json(out_dir / "training_equivalence.json", {"provenance": eq_prov, **eq}, allow_nan=False)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, a few steps: a smoke test (seconds)")
    ap.add_argument("--out", type=Path, default=DATA, help="folder for training.json (default docs/data)")
    ap.add_argument("--plots", type=Path, default=None, help="folder for the SVG plots (default OUT/plots)")
    args = ap.parse_args(argv)
    check_out(ap, args.out / "training.json", "--out")  # before the run: a missing folder is an argument error
    st = QUICK if args.quick else FULL
    res = run(st, args.out, args.plots or args.out / "plots")
    for key, cmp in res["comparisons"]["equal_steps"].items():
        print(cmp["text"])
    print(f"wrote {args.out / 'training.json'} in {res['provenance']['duration_s']:.0f} s "
          f"(load average {os.getloadavg()[0]:.2f})")
    if not args.quick and args.out.resolve() == DATA.resolve():   # this machine's step times, kept apart
        print(f"filed this machine's run as {training_machines.write(res)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
