"""Where the norm goes: ``python -m reference_impl.studies.placements [--quick]``.

Trains the small decoder of :mod:`reference_impl.tiny_lm` with each norm placement, with and without
QK-norm, on bytes of the Python documentation topics (the corpus of the training study, rebuilt here so
this study's numbers depend only on its own sources), and tests published findings at small scale:

- ``placements``: Post-LN, Pre-LN, sandwich, Peri-LN, OLMo 2's reordered norm, DeepNorm, Mix-LN, Pre-LN with
  DyT and with Derf; each without and with QK-norm; several seeds;
- ``init_gradients``: per-block gradient norms at initialisation, Post-LN against Pre-LN (Xiong et al. 2020);
- ``depth_variance``: per-block variance of the residual stream after training, Pre-LN against Peri-LN;
- ``lr_sweep``: final loss and largest attention logit over learning rates, without and with QK-norm
  (Wortsman et al. 2023), and their learning-rate sensitivity;
- ``warmup``: Post-LN and Pre-LN with and without learning-rate warm-up;
- ``reproductions``: one row per finding with a verdict computed from the numbers above. A side is called
  better only where every seed of it beats every seed of the other.

Writes ``docs/data/placements.json`` and SVG plots (light and dark) under ``docs/data/plots/``. ``--quick``
is a smoke run (seconds) whose numbers say nothing about the placements.
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from ..provenance import check_out, finish, record, write_json
from ..tiny_lm import TinyLM, TinyLMConfig, parameter_count
from ..tiny_lm import sources as tiny_lm_sources

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "data"
COMMAND = "python -m reference_impl.studies.placements"
THREADS = 1      # one thread: these tiny matrices gain little from two, and a shared machine hurts two
# the files whose code changes this study's numbers: its imports and the catalog modules of the model's layers
SOURCES = tiny_lm_sources("reference_impl/studies/placements.py")

# key -> (placement, norm, label): the placements of the study, all with LayerNorm or its replacement
VARIANTS = {
    "post": ("post", "ln", "Post-LN"),
    "pre": ("pre", "ln", "Pre-LN"),
    "sandwich": ("sandwich", "ln", "Sandwich"),
    "peri": ("peri", "ln", "Peri-LN"),
    "reordered": ("out", "ln", "Reordered (OLMo 2)"),
    "deepnorm": ("deepnorm", "ln", "DeepNorm"),
    "mixln": ("mixln", "ln", "Mix-LN"),
    "pre-dyt": ("pre", "dyt", "Pre-DyT"),
    "pre-derf": ("pre", "derf", "Pre-Derf"),
}


@dataclass
class Settings:
    model: dict               # TinyLMConfig fields shared by every run unless a part changes them
    batch: int
    eval_every: int
    eval_windows: int
    seeds: list
    variants: list            # keys of VARIANTS
    steps: int                # the placements part
    lr: float
    warmup: int
    grad_layers: int          # init_gradients: depth of the stack and batches averaged
    grad_batches: int
    depth_layers: int         # depth_variance
    sweep_lrs: list           # lr_sweep: Pre-LN without and with QK-norm
    sweep_steps: int
    sweep_warmup: int
    warmup_lrs: list          # warmup: Post- and Pre-LN with warm-up of warmup_steps and without
    warmup_run_steps: int
    warmup_steps: int
    quick: bool = False


FULL = Settings(model=dict(d=32, layers=4, heads=2, ffn=88, context=32), batch=16, eval_every=50,
                eval_windows=64, seeds=[0, 1, 2], variants=list(VARIANTS), steps=250, lr=2e-3, warmup=25,
                grad_layers=12, grad_batches=4, depth_layers=8, sweep_lrs=[1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
                sweep_steps=200, sweep_warmup=20, warmup_lrs=[3e-3, 1e-2], warmup_run_steps=200, warmup_steps=50)
QUICK = Settings(model=dict(d=8, layers=2, heads=2, ffn=16, context=8), batch=2, eval_every=100, eval_windows=2,
                 seeds=[0, 1], variants=list(VARIANTS), steps=1, lr=1e-3, warmup=1, grad_layers=3,
                 grad_batches=1, depth_layers=3, sweep_lrs=[1e-3, 1e-1], sweep_steps=1,
                 sweep_warmup=1, warmup_lrs=[3e-3], warmup_run_steps=1, warmup_steps=1, quick=True)


# ------------------------------------------------------------------------------------------- the text


def load_corpus() -> tuple[torch.Tensor, torch.Tensor, dict]:
    """UTF-8 bytes of the ``help()`` topics of the standard library, sorted by topic name; every tenth topic
    from the sixth on is the validation text (the split of the training study)."""
    from pydoc_data import topics

    keys = sorted(topics.topics)
    held = set(keys[5::10])
    train = "\n\n".join(topics.topics[k] for k in keys if k not in held).encode("utf-8")
    val = "\n\n".join(topics.topics[k] for k in keys if k in held).encode("utf-8")
    info = {"source": "pydoc_data/topics.py of the Python standard library (the text help() shows)",
            "python": sys.version.split()[0], "licence": "PSF License Agreement for Python",
            "train_bytes": len(train), "val_bytes": len(val),
            "train_sha256": hashlib.sha256(train).hexdigest()[:16], "val_sha256": hashlib.sha256(val).hexdigest()[:16]}
    to_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).long()   # noqa: E731
    return to_tensor(train), to_tensor(val), info


def sample(data, batch: int, context: int, gen: torch.Generator):
    start = torch.randint(0, data.numel() - context - 1, (batch,), generator=gen)
    chunk = data[start[:, None] + torch.arange(context + 1)]
    return chunk[:, :-1], chunk[:, 1:]


def windows(data, n: int, context: int):
    """``n`` evenly spaced windows of the validation text (the same for every run)."""
    starts = torch.linspace(0, data.numel() - context - 2, n).long()
    chunk = data[starts[:, None] + torch.arange(context + 1)]
    return chunk[:, :-1], chunk[:, 1:]


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps (none when 0), then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - 1 - warmup))
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


# ------------------------------------------------------------------------------------------ measuring


@torch.no_grad()
def probe(model: TinyLM, val, batch: int) -> dict:
    """Validation loss, the largest |attention logit| and the per-depth variance of the residual stream
    (variance over features, mean over tokens; index 0 is the embedding, i the output of block i)."""
    model.eval()
    x, y = val
    for a in model.attention_layers():
        a.record_logits, a.max_logit = True, 0.0
    total, var = 0.0, None
    for i in range(0, len(x), batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        hs = model.hidden_states(xb)
        logits = model.head(model.final_norm(hs[-1]))
        total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.reshape(-1))) * len(xb)
        v = np.array([float(h.var(dim=-1, unbiased=False).mean()) for h in hs]) * len(xb)
        var = v if var is None else var + v
    top = max(a.max_logit for a in model.attention_layers())
    for a in model.attention_layers():
        a.record_logits = False
    model.train()
    finite = lambda v: float(v) if math.isfinite(v) else None   # noqa: E731
    return {"val_loss": finite(total / len(x)), "max_attn_logit": finite(top),
            "layer_variance": [finite(v) for v in var / len(x)]}


def train_run(cfg: TinyLMConfig, st: Settings, seed: int, data, lr: float, warmup: int, steps: int) -> dict:
    """One run: AdamW (betas 0.9, 0.95, no weight decay), the schedule of :func:`lr_at`, the same batches for
    every configuration with the same seed. A non-finite loss stops the run and marks it diverged."""
    train, val = data
    torch.manual_seed(seed)
    model = TinyLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(1000 + seed)
    first = probe(model, val, st.batch)
    out = {"seed": seed, "lr": lr, "warmup": warmup, "steps": [0], "val_loss": [first["val_loss"]],
           "initial_val_loss": first["val_loss"], "diverged": False}
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup)
        x, y = sample(train, st.batch, cfg.context, gen)
        loss = model.loss(x, y)
        if not math.isfinite(float(loss.detach())):
            out["diverged"] = True
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % st.eval_every == 0 and step + 1 < steps:
            out["steps"].append(step + 1)
            out["val_loss"].append(probe(model, val, st.batch)["val_loss"])
    end = probe(model, val, st.batch)
    if end["val_loss"] is None:
        out["diverged"] = True
    if not out["diverged"]:
        out["steps"].append(steps)
        out["val_loss"].append(end["val_loss"])
    out.update(final_val_loss=None if out["diverged"] else end["val_loss"], max_attn_logit=end["max_attn_logit"],
               layer_variance=end["layer_variance"])
    return out


def config_for(st: Settings, key: str, qk: bool, **changes) -> TinyLMConfig:
    placement, norm, _ = VARIANTS[key]
    return TinyLMConfig(**{**st.model, **changes}, norm=norm, placement=placement, qk_norm="ln" if qk else "none")


def init_gradients(st: Settings, data, cfg: TinyLMConfig, seed: int) -> dict:
    """Per-block gradient norms at initialisation, averaged over ``grad_batches`` batches: of the MLP's
    output weight (the FFN's second matrix, which Xiong et al. analyse) and of the whole block."""
    torch.manual_seed(seed)
    model = TinyLM(cfg)
    gen = torch.Generator().manual_seed(2000 + seed)
    w2, whole = np.zeros(cfg.layers), np.zeros(cfg.layers)
    for _ in range(st.grad_batches):
        model.zero_grad(set_to_none=True)
        x, y = sample(data[0], st.batch, cfg.context, gen)
        model.loss(x, y).backward()
        for i, blk in enumerate(model.blocks):
            w2[i] += float(blk.mlp.down.weight.grad.norm())
            whole[i] += math.sqrt(sum(float(p.grad.pow(2).sum()) for p in blk.parameters() if p.grad is not None))
    return {"seed": seed, "mlp_out_weight": list(w2 / st.grad_batches), "block": list(whole / st.grad_batches)}


# ----------------------------------------------------------------------------------- comparisons


def stats(values: list) -> dict:
    finite = [v for v in values if v is not None]
    out = {"values": values, "n": len(values), "n_finite": len(finite)}
    if finite:
        out.update(mean=float(np.mean(finite)), min=float(np.min(finite)), max=float(np.max(finite)))
    return out


def separated_lower(a: list, b: list) -> str | None:
    """"a" when every value of ``a`` is below every value of ``b``, "b" for the reverse, else None. A None
    (a diverged run) counts as worse than any number."""
    inf = float("inf")
    fa, fb = [inf if v is None else v for v in a], [inf if v is None else v for v in b]
    if max(fa) < min(fb):
        return "a"
    if max(fb) < min(fa):
        return "b"
    return None


def compare(a: list, b: list, label_a: str, label_b: str, what: str) -> dict:
    """Per-seed values of two sides (lower is better); names a lower side only where the seeds separate."""
    low = separated_lower(a, b)
    lower = {"a": label_a, "b": label_b, None: None}[low]
    span = lambda s: (f"{s['mean']:.3g} (seeds {s['min']:.3g} to {s['max']:.3g}" + (  # noqa: E731
        f", {s['n'] - s['n_finite']} diverged)" if s["n_finite"] < s["n"] else ")") if s["n_finite"] else "all diverged")
    sa, sb = stats(a), stats(b)
    text = (f"{what}: {label_a} {span(sa)} against {label_b} {span(sb)}; "
            + (f"{lower} lower in every seed" if lower else "the seed ranges overlap: no difference shown"))
    return {"a": label_a, "b": label_b, "what": what, "a_stats": sa, "b_stats": sb, "lower": lower,
            "separated": lower is not None, "text": text}


def sensitivity(losses_by_lr: list[list], initial: list) -> list:
    """Learning-rate sensitivity per seed (Wortsman et al. 2023, arXiv:2309.14322): the mean over learning
    rates of min(loss, initial loss) less the best loss over learning rates; a diverged run counts as the
    initial loss."""
    out = []
    for s, l0 in enumerate(initial):
        vals = [min(col[s] if col[s] is not None else l0, l0) for col in losses_by_lr]
        out.append(float(np.mean(vals) - min(vals)))
    return out


def verdict(parts: list[bool]) -> str:
    return "reproduced" if all(parts) else "partly reproduced" if any(parts) else "not reproduced"


def growth(values: list, first: int, last: int) -> float | None:
    if values[first] is None or values[last] is None or values[first] <= 0:
        return None
    return values[last] / values[first]


# ------------------------------------------------------------------------------------------- parts


def progress(msg: str, t0: float, counter: list) -> None:
    counter[0] += 1
    done, total = counter
    el = time.monotonic() - t0
    print(f"[{done}/{total}] {msg}  elapsed {el:.0f} s, left ~{el / done * (total - done):.0f} s",
          file=sys.stderr, flush=True)


def run_placements(st: Settings, data, t0, counter) -> dict:
    out = {}
    for seed in st.seeds:                          # seeds outermost: configurations interleave in time
        for key in st.variants:
            for qk in (False, True):
                name = f"{key}{'+qk' if qk else ''}"
                cfg = config_for(st, key, qk)
                entry = out.setdefault(name, {"label": VARIANTS[key][2] + (" + QK-norm" if qk else ""),
                                              "variant": key, "qk_norm": qk, "config": cfg.to_dict(),
                                              "parameters": parameter_count(TinyLM(cfg)), "runs": []})
                entry["runs"].append(train_run(cfg, st, seed, data, st.lr, st.warmup, st.steps))
                progress(f"placement {name} seed {seed}", t0, counter)
    for v in out.values():
        v["final"] = stats([r["final_val_loss"] for r in v["runs"]])
        v["max_attn_logit"] = stats([r["max_attn_logit"] for r in v["runs"]])
    return out


def run_init_gradients(st: Settings, data, t0, counter) -> dict:
    out = {}
    for key in ("post", "pre"):
        cfg = config_for(st, key, False, layers=st.grad_layers)
        out[key] = {"label": VARIANTS[key][2], "config": cfg.to_dict(),
                    "runs": [init_gradients(st, data, cfg, s) for s in st.seeds]}
        for r in out[key]["runs"]:
            r["last_over_first"] = growth(r["mlp_out_weight"], 0, -1)
        progress(f"gradients at init {key}", t0, counter)
    return out


def run_depth_variance(st: Settings, data, t0, counter) -> dict:
    out = {}
    for seed in st.seeds:
        for key in ("pre", "peri"):
            cfg = config_for(st, key, False, layers=st.depth_layers)
            e = out.setdefault(key, {"label": VARIANTS[key][2], "config": cfg.to_dict(), "runs": []})
            run = train_run(cfg, st, seed, data, st.lr, st.warmup, st.steps)
            run["growth"] = growth(run["layer_variance"], 1, -1)     # last block's output over the first's
            e["runs"].append(run)
            progress(f"depth variance {key} seed {seed}", t0, counter)
    return out


def lr_key(lr: float) -> str:
    return f"lr_{lr:.0e}"


def run_lr_sweep(st: Settings, data, t0, counter) -> dict:
    out = {"lrs": st.sweep_lrs, "steps": st.sweep_steps, "warmup": st.sweep_warmup, "sides": {}}
    for seed in st.seeds:
        for lr in st.sweep_lrs:
            for qk in (False, True):
                side = "qk_norm" if qk else "no_qk_norm"
                cfg = config_for(st, "pre", qk)
                e = out["sides"].setdefault(side, {"label": "Pre-LN + QK-norm" if qk else "Pre-LN",
                                                   "config": cfg.to_dict(), "by_lr": {}})
                run = train_run(cfg, st, seed, data, lr, st.sweep_warmup, st.sweep_steps)
                e["by_lr"].setdefault(lr_key(lr), {"lr": lr, "runs": []})["runs"].append(run)
                progress(f"lr sweep {side} lr {lr:g} seed {seed}", t0, counter)
    for e in out["sides"].values():
        for v in e["by_lr"].values():
            v["final"] = stats([r["final_val_loss"] for r in v["runs"]])
            v["max_attn_logit"] = stats([r["max_attn_logit"] for r in v["runs"]])
        cols = [[r["final_val_loss"] for r in e["by_lr"][lr_key(lr)]["runs"]] for lr in st.sweep_lrs]
        init = [r["initial_val_loss"] for r in e["by_lr"][lr_key(st.sweep_lrs[0])]["runs"]]
        e["sensitivity"] = stats(sensitivity(cols, init))
    return out


def run_warmup(st: Settings, data, t0, counter) -> dict:
    out = {}
    for lr in st.warmup_lrs:
        res = {"lr": lr, "warmup_steps": st.warmup_steps, "steps": st.warmup_run_steps, "runs": {}}
        for seed in st.seeds:
            for key in ("post", "pre"):
                for wu in (True, False):
                    name = f"{key}-{'warmup' if wu else 'no_warmup'}"
                    run = train_run(config_for(st, key, False), st, seed, data, lr, st.warmup_steps if wu else 0,
                                    st.warmup_run_steps)
                    res["runs"].setdefault(name, []).append(run)
                    progress(f"warm-up lr {lr:g} {name} seed {seed}", t0, counter)
        fin = lambda n: [r["final_val_loss"] for r in res["runs"][n]]   # noqa: E731
        res["post"] = compare(fin("post-warmup"), fin("post-no_warmup"), "Post-LN with warm-up",
                              "Post-LN without warm-up", f"final validation loss at lr {lr:g}")
        res["pre"] = compare(fin("pre-warmup"), fin("pre-no_warmup"), "Pre-LN with warm-up",
                             "Pre-LN without warm-up", f"final validation loss at lr {lr:g}")
        out[lr_key(lr)] = res
    return out


# ------------------------------------------------------------------------------------ reproductions


def reproductions(res: dict, st: Settings) -> list[dict]:
    rows = []
    finals = lambda k: [r["final_val_loss"] for r in res["placements"][k]["runs"]]   # noqa: E731

    g = res["init_gradients"]
    post = [r["last_over_first"] for r in g["post"]["runs"]]
    pre = [r["last_over_first"] for r in g["pre"]["runs"]]
    c = compare(pre, post, "Pre-LN", "Post-LN", "last block's over first block's gradient norm (MLP output weight)")
    parts = [c["lower"] == "Pre-LN", all(v is not None and v > 1 for v in post),
             all(v is not None and v < 1.5 for v in pre)]
    rows.append({"id": "xiong_init_gradients", "paper": "Xiong et al. 2020", "arxiv": "2002.04745",
                 "finding": "at initialisation Post-LN's gradient norm grows towards the output layer; Pre-LN's does not",
                 "measured": f"per-block gradient norm of the MLP output weight at initialisation, {st.grad_layers} "
                             f"blocks, {len(st.seeds)} seeds; ratio of the last block's to the first block's",
                 "criteria": ["every Post-LN seed's ratio above every Pre-LN seed's", "Post-LN ratio > 1 in every seed",
                              "Pre-LN ratio < 1.5 in every seed"],
                 "parts": parts, "comparisons": [c], "verdict": verdict(parts)})

    d = res["depth_variance"]
    pre = [r["growth"] for r in d["pre"]["runs"]]
    peri = [r["growth"] for r in d["peri"]["runs"]]
    c = compare(peri, pre, "Peri-LN", "Pre-LN", "variance of the last block's output over the first block's")
    parts = [c["lower"] == "Peri-LN", all(v is not None and v > 2 for v in pre)]
    rows.append({"id": "depth_variance", "paper": "Kim et al. 2025 (Peri-LN); Sun et al. 2025 (Curse of Depth)",
                 "arxiv": "2502.02732; 2502.05795",
                 "finding": "hidden-state variance grows with depth under Pre-LN and stays balanced under Peri-LN",
                 "measured": f"variance of the residual stream after each of {st.depth_layers} blocks after "
                             f"{st.steps} training steps, {len(st.seeds)} seeds",
                 "criteria": ["every Peri-LN seed's growth below every Pre-LN seed's",
                              "Pre-LN's variance grows more than twofold in every seed"],
                 "parts": parts, "comparisons": [c], "verdict": verdict(parts)})

    sw = res["lr_sweep"]
    top, low = lr_key(st.sweep_lrs[-1]), lr_key(st.sweep_lrs[0])
    logit = lambda side, k: [r["max_attn_logit"] for r in sw["sides"][side]["by_lr"][k]["runs"]]   # noqa: E731
    c1 = compare(logit("qk_norm", top), logit("no_qk_norm", top), "with QK-norm", "without QK-norm",
                 f"largest attention logit at lr {st.sweep_lrs[-1]:g}")
    c2 = compare(logit("no_qk_norm", low), logit("no_qk_norm", top), f"lr {st.sweep_lrs[0]:g}",
                 f"lr {st.sweep_lrs[-1]:g}", "largest attention logit without QK-norm")
    c3 = compare(sw["sides"]["qk_norm"]["sensitivity"]["values"], sw["sides"]["no_qk_norm"]["sensitivity"]["values"],
                 "with QK-norm", "without QK-norm", "learning-rate sensitivity (nats)")
    parts = [c2["lower"] == f"lr {st.sweep_lrs[0]:g}" and c1["lower"] == "with QK-norm", c3["lower"] == "with QK-norm"]
    rows.append({"id": "wortsman_qk_norm", "paper": "Wortsman et al. 2023", "arxiv": "2309.14322",
                 "finding": "without QK-norm attention logits grow at high learning rates and the loss degrades; "
                            "QK-layernorm lowers the learning-rate sensitivity",
                 "measured": f"Pre-LN at {len(st.sweep_lrs)} learning rates x {len(st.seeds)} seeds, "
                             f"{st.sweep_steps} steps: final loss and largest attention logit",
                 "criteria": ["without QK-norm the largest logit at the highest learning rate is above every seed at "
                              "the lowest, and above every seed with QK-norm",
                              "every seed's learning-rate sensitivity lower with QK-norm"],
                 "parts": parts, "comparisons": [c1, c2, c3], "verdict": verdict(parts)})

    wu = res["warmup"]
    per_lr = [(v["post"]["lower"] == "Post-LN with warm-up", v["pre"]["lower"] != "Pre-LN with warm-up")
              for v in wu.values()]
    parts = [any(p for p, _ in per_lr), any(p and q for p, q in per_lr)]
    rows.append({"id": "warmup", "paper": "Xiong et al. 2020", "arxiv": "2002.04745",
                 "finding": "Post-LN needs learning-rate warm-up; Pre-LN trains as well without it",
                 "measured": f"final loss after {st.warmup_run_steps} steps with {st.warmup_steps} warm-up steps and "
                             f"without, at learning rates {', '.join(f'{x:g}' for x in st.warmup_lrs)}, "
                             f"{len(st.seeds)} seeds",
                 "criteria": ["at some learning rate every Post-LN seed ends lower with warm-up",
                              "at such a learning rate Pre-LN's seeds do not separate in favour of warm-up"],
                 "parts": parts, "comparisons": [c for v in wu.values() for c in (v["post"], v["pre"])],
                 "verdict": verdict(parts)})

    c = compare(finals("pre-dyt"), finals("pre"), "Pre-DyT", "Pre-LN", "final validation loss")
    close = (c["a_stats"]["n_finite"] == c["a_stats"]["n"] and c["b_stats"]["n_finite"] == c["b_stats"]["n"]
             and abs(c["a_stats"]["mean"] - c["b_stats"]["mean"]) < 0.02 * c["b_stats"]["mean"])
    parts = [c["lower"] != "Pre-LN", close]
    rows.append({"id": "dyt_matches_norm", "paper": "Zhu et al. 2025 (DyT)", "arxiv": "2503.10622",
                 "finding": "DyT in place of every LayerNorm matches the normalized model",
                 "measured": f"final validation loss after {st.steps} steps, {len(st.seeds)} seeds, no QK-norm",
                 "criteria": ["Pre-LN is not lower in every seed", "the means differ by less than 2%"],
                 "parts": parts, "comparisons": [c], "verdict": verdict(parts)})

    c = compare(finals("pre-derf"), finals("pre-dyt"), "Pre-Derf", "Pre-DyT", "final validation loss")
    parts = [c["lower"] != "Pre-DyT", c["lower"] == "Pre-Derf"]
    rows.append({"id": "derf_vs_dyt", "paper": "Chen et al. 2025 (Derf)", "arxiv": "2512.10938",
                 "finding": "Derf is at least as good as DyT (the paper finds it better)",
                 "measured": f"final validation loss after {st.steps} steps, {len(st.seeds)} seeds, no QK-norm",
                 "criteria": ["DyT is not lower in every seed", "Derf is lower in every seed"],
                 "parts": parts, "comparisons": [c], "verdict": verdict(parts)})
    for r in rows:
        r["verdict_text"] = f"{r['verdict']} at this scale"
    return rows


# --------------------------------------------------------------------------------------------- main


def status_text(quick: bool, prov: dict) -> str:
    if quick:
        return ("These numbers come from a smoke run (--quick: a tiny model trained for a few steps). They show "
                "that the pipeline works; they say nothing about the placements. The full study replaces them.")
    return (f"Measured on {prov['machine']['cpu']} with {THREADS} threads, load average "
            f"{prov['load_avg'][0]:.2f} at the start and {prov['load_avg_end'][0]:.2f} at the end, "
            f"in {prov['duration_s'] / 60:.1f} minutes.")


def run(st: Settings, out_dir: Path, plot_dir: Path) -> dict:
    torch.set_num_threads(THREADS)
    cmd = COMMAND + (" --quick" if st.quick else "")
    prov = record(cmd, SOURCES, quick=st.quick, packages=("torch", "numpy", "matplotlib"),
                  machine_extra={"torch_threads": THREADS})
    train, val, corpus = load_corpus()
    data = (train, windows(val, st.eval_windows, st.model["context"]))
    n = len(st.seeds)
    counter = [0, n * len(st.variants) * 2 + 2 + 2 * n + 2 * n * len(st.sweep_lrs) + 4 * n * len(st.warmup_lrs)]
    t0 = time.monotonic()
    res = {"quick": st.quick, "settings": asdict(st), "corpus": corpus,
           "variants": {k: {"placement": p, "norm": nm, "label": lb} for k, (p, nm, lb) in VARIANTS.items()}}
    res["init_gradients"] = run_init_gradients(st, data, t0, counter)
    res["placements"] = run_placements(st, data, t0, counter)
    res["depth_variance"] = run_depth_variance(st, data, t0, counter)
    res["lr_sweep"] = run_lr_sweep(st, data, t0, counter)
    res["warmup"] = run_warmup(st, data, t0, counter)
    res["reproductions"] = reproductions(res, st)
    finish(prov)
    res = {"provenance": prov, "status_text": status_text(st.quick, prov),
           "status_short": ("smoke-run numbers, to be replaced by the full study" if st.quick else
                            f"{n} seeds per configuration, {st.steps} steps"), **res}
    from .placements_plots import plots

    res["plots"] = plots(res, plot_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "placements.json", res, allow_nan=False)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, a few steps: a smoke test (seconds)")
    ap.add_argument("--out", type=Path, default=DATA, help="folder for placements.json (default docs/data)")
    ap.add_argument("--plots", type=Path, default=None, help="folder for the SVG plots (default OUT/plots)")
    args = ap.parse_args(argv)
    check_out(ap, args.out / "placements.json", "--out")  # before the run: a missing folder is an argument error
    res = run(QUICK if args.quick else FULL, args.out, args.plots or args.out / "plots")
    for row in res["reproductions"]:
        print(f"{row['paper']}: {row['verdict_text']}")
    print(f"wrote {args.out / 'placements.json'} in {res['provenance']['duration_s']:.0f} s "
          f"(load average {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
