"""Placing a model type: build it tiny, trace it (:mod:`.trace`), and classify its norms by tensor identity.

:func:`place` returns the record the census file keeps per model type (CONTRACT section 2): the first
decoder layer's norms in call order with their roles, the placement they add up to, the QK-norm kind and
its order against the rotary embedding, the final norm, extra norms and the config's default eps.

Placement from the roles of the norms on the residual stream's width in the first decoder layer:
``pre`` (only ``input``), ``output`` (only ``sublayer_output``: OLMo 2's order), ``sandwich`` (``input``
and ``sublayer_output``), ``post`` (only ``residual_sum``: the original Transformer), ``other`` (anything
else, described in ``placement_note``). A norm whose output both the attention and the MLP read has the
sub-layer ``attention+mlp``; ``parallel`` is true when the MLP reads the same input as the attention rather than
the sum holding the attention's output (GPT-J, GPT-NeoX, Cohere, Falcon, Phi), said in ``placement_note`` too.
"""
from __future__ import annotations

import copy
import importlib
import re
import sys

import torch

from .discover import is_norm_name
from .shrink import shrink
from .trace import _ATTN, _K, _MLP, _Q, EPS_ATTRS, TOKENS, Trace, _storage, same


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:300]


def config_eps(cfg) -> tuple[float | None, str | None]:
    for target in (vars(cfg).get("text_config"), cfg):
        if target is None:
            continue
        for attr in EPS_ATTRS:
            v = vars(target).get(attr)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v), attr
    return None, None


def _layers(tr: Trace):
    """(prefix, number of layers) of the called ModuleList of decoder layers (text side preferred)."""
    called = {c.name for c in tr.calls}
    best = None
    for name, mod in tr.model.named_modules():
        if not isinstance(mod, torch.nn.ModuleList) or len(mod) < 2:
            continue
        if f"{name}.0" not in called:
            continue
        if not any(isinstance(m, tr.norm_types) for m in mod[0].modules()):
            continue
        score = (0 if re.search(r"vision|visual|audio|image|speech|vq|encoder\.", name) else 1, len(mod))
        if best is None or score > best[0]:
            best = (score, name, len(mod))
    if best is None:
        raise RuntimeError("no called list of decoder layers that holds a norm was found")
    return best[1], best[2]


def _rel(name: str, prefix: str) -> str:
    return name[len(prefix) + 1:] if name.startswith(prefix + ".") else name


def _sublayer_kind(rel: str, cls: str) -> str | None:
    """attention / mlp from the attribute name, else from the class name's last match (``Qwen3MoeAttention`` is
    attention, ``Qwen3_5MoeGatedDeltaNet`` a token mixer: the model's own name may say "Moe")."""
    last = rel.split(".")[0]
    if _MLP.search(last):
        return "mlp"
    if _ATTN.search(last):
        return "attention"
    hits = [(m.end(), k) for k, rx in (("mlp", _MLP), ("attention", _ATTN)) for m in rx.finditer(cls)]
    return max(hits)[1] if hits else None


def _layer_calls(tr: Trace, prefix: str, index: int):
    """The call of layer ``prefix.index``, the calls inside it and its sub-layers (direct children) with kinds."""
    lname = f"{prefix}.{index}"
    layer = next(c for c in tr.calls if c.name == lname)
    inside = [c for c in tr.calls if layer.idx < c.idx < (layer.end or 1 << 60) and c.name.startswith(lname + ".")]
    subs = []
    for c in inside:
        rel = _rel(c.name, lname)
        if "." in rel or isinstance(c.module, tr.norm_types):
            continue
        kind = _sublayer_kind(rel, type(c.module).__name__)
        if kind:
            subs.append((c, kind))
    return lname, layer, inside, subs


def parallel_of(tr: Trace, prefix: str, index: int = 0) -> str | None:
    """How a layer runs attention and the MLP side by side, or None when the MLP reads the attention's sum.

    Parallel: the MLP's input and the attention's input (each traced back through the norm that made it) are the
    same tensor, so the MLP does not see the attention's output; both outputs are added to the stream. Returns
    ``"shared"`` when one norm's output feeds both (GPT-J, Cohere, Phi) and ``"separate"`` when each has its own
    norm on the same input (GPT-NeoX with ``use_parallel_residual``)."""
    lname, layer, inside, subs = _layer_calls(tr, prefix, index)
    norms = [c for c in inside if isinstance(c.module, tr.norm_types) and c.y is not None]

    def source(s):
        n = next((n for n in reversed(norms) if n.idx < s.idx and same(n.y, s.x)), None)
        return (n.x if n is not None else s.x), n

    for a, ka in subs:
        for m, km in subs:
            if ka != "attention" or km != "mlp" or a.x is None or m.x is None:
                continue
            (xa, na), (xm, nm) = source(a), source(m)
            if same(xa, xm):
                return "shared" if na is not None and na is nm else "separate"
    return None


def classify_layer(tr: Trace, prefix: str, hidden: int, head_dim: int | None, index: int = 0):
    """The norms of layer ``prefix.index`` in call order, each with its role and sub-layer."""
    lname, layer, inside, subs = _layer_calls(tr, prefix, index)
    linears = [c for c in inside if isinstance(c.module, torch.nn.Linear) and c.y is not None]
    adds = [(i, ops, out) for i, ops, out in tr.adds if layer.idx < i < (layer.end or 1 << 60)]
    rope = [(i, outs) for i, outs in tr.rope if layer.idx < i < (layer.end or 1 << 60)]
    scales = [(i, ops, out) for i, ops, out in tr.scales if layer.idx < i < (layer.end or 1 << 60)]
    streams = _streams(layer, adds, scales, [c for c in inside if isinstance(c.module, tr.norm_types)])
    rows = []
    for c in inside:
        if not isinstance(c.module, tr.norm_types) or c.x is None:
            continue
        rel = _rel(c.name, lname)
        role, sub, note = _role(c, layer, subs, linears, adds, hidden, head_dim, rel, rope, inside, lname, scales,
                                streams)
        if role == "input" and {"attention", "mlp"} <= _consumers(c, inside, lname):
            sub = "attention+mlp"   # a parallel block: one norm feeds both sub-layers
        rows.append({"module": rel, "class": type(c.module).__name__, "role": role, "sublayer": sub,
                     "note": note, "_idx": c.idx, "_fed": _consumer(c, inside, c.y, lname),
                     "_after_rope": any(isinstance(o, torch.Tensor) and _storage(o) == _storage(c.x)
                                        for i, outs in tr.rope if i < c.idx for o in outs)})
    if any(r["role"] == "sublayer_output" for r in rows):
        # a layer that also normalizes its sub-layers' outputs (Dory's sandwich on the unit sphere): a norm at its
        # start is the sandwich's input norm, even when its output is the residual
        for r in rows:
            if r["role"] == "residual_sum" and r["note"] == _START:
                r.update(role="input", sublayer=r["_fed"], note=None)
    return rows, layer


_START = "at the start of the layer, on the previous layer's last sum (or the embeddings); its output is the residual"


def _qk_name(name: str) -> str | None:
    return "q" if _Q.search(name) else "k" if _K.search(name) else None


_FFN_PART = re.compile(r"^(fc\d?|intermediate|c_fc|wi|w1|w3|dense_h_to_4h|up_proj|gate_proj|ff\w*)$", re.I)


def _path_kind(rel: str) -> str | None:
    """attention / mlp from any component of a module path inside the layer."""
    for part in rel.split("."):
        if _MLP.search(part) or _FFN_PART.match(part):
            return "mlp"
        if _ATTN.search(part):
            return "attention"
    return None


def _consumer(c, inside, y, lname) -> str | None:
    """attention / mlp: the kind of the first call inside the layer that reads ``y`` and has a kind (a side
    block without one, Gemma 3n's LAUREL, may read the input norm's output before the attention does)."""
    for d in inside:
        if d.idx > c.idx and d is not c and same(d.x, y):
            kind = _path_kind(_rel(d.name, lname))
            if kind:
                return kind
    return None


def _consumers(c, inside, lname) -> set:
    """attention / mlp: the kinds of every call inside the layer that reads the norm's output."""
    return {_path_kind(_rel(d.name, lname)) for d in inside if d.idx > c.idx and d is not c and same(d.x, c.y)} - {None}


def _inner_output(c, subs, linears, lname):
    """A norm inside a sub-layer on what its output projection reads: after it, the sub-layer calls exactly one
    Linear, its last (Qwen3-Next's gated norm before out_proj, BitNet's before down_proj). (kind, note) or None."""
    s, kind = next(((s, k) for s, k in subs if s.idx < c.idx < (s.end or 0)), (None, None))
    if s is None or c.n_out != 1:   # a norm returning queries and keys together is no output norm
        return None
    after = [p for p in linears if c.idx < p.idx < (s.end or 0)]
    if len(after) != 1:
        return None
    gate = "; gated (the norm also takes a gate tensor)" if c.n_in >= 2 else ""
    return kind, (f"inside {type(s.module).__name__} ({_rel(s.name, lname)}), on what "
                  f"{_rel(after[0].name, s.name)} reads{gate}")


def _streams(layer, adds, scales, norms=()) -> list:
    """The residual stream's tensors in a layer: its input, every sum with a stream operand (scaled or not),
    and a norm's output taken from the stream (post-LN carries it on; in pre-LN nothing adds it)."""
    out = [layer.x]
    events = sorted([(i, "add", ops, o) for i, ops, o in adds] + [(i, "scale", ops, o) for i, ops, o in scales]
                    + [(n.idx, "norm", [n.x], n.y) for n in norms if n.x is not None and n.y is not None],
                    key=lambda e: e[0])
    scaled = []
    for i, kind, ops, o in events:
        if kind == "norm":
            if any(same(ops[0], t) for t in out) and o.shape == ops[0].shape:
                out.append(o)
        elif kind == "scale":
            if any(same(a, t) for a in ops for t in out):
                scaled.append(o)
        elif any(same(a, t) for a in ops for t in out + scaled):
            out.append(o)
    return out


def _role(c, layer, subs, linears, adds, hidden, head_dim, rel, rope=(), inside=(), lname="", scales=(),
          streams=()):
    x, y = c.x, c.y
    width = x.shape[-1]
    owner = next((k for s, k in subs if s.idx < c.idx < (s.end or 0)), None) or None
    proj = next((p for p in reversed(linears) if p.idx < c.idx and _storage(p.y) == _storage(x)), None)
    which = None
    for _, outs in rope:
        for i, o in enumerate(outs[:2]):
            if isinstance(o, torch.Tensor) and _storage(o) == _storage(x):
                which = "qk"[i]
    # the residual stream's width: what the input is, and which of input and output goes on
    fed = _consumer(c, inside, y, lname)
    if width == hidden:
        if same(x, layer.x):
            # its output is what the layer adds a sub-layer's output to (MiniMax): the norm of the previous
            # layer's last sum, moved to the start of this layer, so every addition is followed by a norm
            kept = [y] + [out for i, ops, out in scales if i > c.idx and any(same(o, y) for o in ops)]
            inside_sub = [(s_.idx, s_.end or 0) for s_, _ in subs]   # a token shift's mixing adds are no residual
            if fed and any(i > c.idx and not any(a < i < e for a, e in inside_sub)
                           and any(same(o, t) for o in ops for t in kept) for i, ops, _ in adds):
                return "residual_sum", None, _START
            return "input", fed, None
        made = next((ops for i, ops, out in reversed(adds) if i < c.idx and same(out, x)), None)
        if made is not None and not any(same(t, x) for t in streams):
            made = None   # a sum made inside a sub-layer (experts added up), not the residual add
        if made is not None:
            carried = [x] + [out for i, ops, out in scales if i > c.idx and any(same(o, x) for o in ops)]
            x_goes_on = any(i > c.idx and any(same(o, t) for o in ops for t in carried) for i, ops, _ in adds)
            if x_goes_on:
                return "input", fed, None
            before = [d for d in inside if d.end is not None and d.end < c.idx and _path_kind(_rel(d.name, lname))]
            src = owner or (_path_kind(_rel(before[-1].name, lname)) if before else None)
            return "residual_sum", src, None
        for s_, k in subs:
            if same(x, s_.y):
                return "sublayer_output", k, None
    if proj is not None or which is not None or width != hidden:
        # inside a token mixer: a query or key (by a projection's storage or a rotary output), a latent
        pname = proj.name.split(".")[-1] if proj is not None else None
        if which is None and pname is not None:
            which = _qk_name(pname)
            if which and _qk_name(pname.replace("query", "").replace("q", "")) == "k":
                which = _qk_name(rel.split(".")[-1])   # a fused projection (query_key_value): the norm's name says
            if re.search(r"kv_a|q_a|lora|latent|compress|wkv_a|wq_a", pname):
                return "latent", "attention", f"on the output of {pname}"
            if which is None and re.fullmatch(r"v|wv|v_proj|value", pname):
                return "v_per_head" if head_dim and width == head_dim else "v_whole", "attention", \
                    f"a norm on the values (the output of {pname}), width {width}"
        if which is None and proj is None:
            which = _qk_name(rel.split(".")[-1])
        nest = rel.split(".")[1:-1]   # a module between the sub-layer and the norm, holding its own projection
        if which and nest and proj is not None and not _ATTN.search(nest[-1]) \
                and _rel(proj.name, lname).startswith(".".join(rel.split(".")[:-1]) + "."):
            return "other", "attention", (f"a {which} norm of {'.'.join(nest)} inside the attention (on its own "
                                          f"{pname}), not on the attention's queries or keys")
        if which and head_dim and width == head_dim:
            return f"{which}_per_head", "attention", None
        if which and head_dim and width % head_dim == 0:
            return f"{which}_whole", "attention", None
        inner = _inner_output(c, subs, linears, lname) if which is None and proj is None else None
        if inner:
            return "inner_output", inner[0], inner[1]
        where = owner or _path_kind(rel)
        what = f"on the output of {pname}" if pname else "on a tensor made inside the layer"
        if where is None and width != hidden:
            return "other", None, f"width {width}, not the residual stream's {hidden}, {what}"
        return ("latent" if proj is not None and width != hidden else "other"), where, \
            f"width {width} inside the {where or 'layer'}, {what}"
    inner = _inner_output(c, subs, linears, lname)
    if inner:
        return "inner_output", inner[0], inner[1]
    if fed is not None:
        return "input", fed, "its input is neither the layer's input nor a recorded sum"
    return "other", owner, "its input is neither the stream, a sub-layer's output nor a sum"


def placement_of(rows) -> tuple[str, str | None]:
    roles = {r["role"] for r in rows if r["role"] in ("input", "sublayer_output", "residual_sum")}
    if not rows:
        return "other", "no norm in the decoder layer"
    if roles == {"input"}:
        return "pre", None
    if roles == {"sublayer_output"}:
        return "output", None
    if roles == {"input", "sublayer_output"}:
        return "sandwich", None
    if roles == {"residual_sum"}:
        return "post", None
    if not roles:
        return "other", "no norm on the residual stream in the decoder layer"
    return "other", "norms on " + ", ".join(sorted(roles))


def qk_of(rows, trace_rope, layer) -> tuple[str, str | None]:
    qk = [r for r in rows if r["role"] in ("q_per_head", "k_per_head", "q_whole", "k_whole")]
    kinds = {"per_head" if r["role"].endswith("per_head") else "whole_projection" for r in qk}
    if not qk:
        kind = "none"
    elif len(kinds) == 1:
        kind = kinds.pop()
    else:
        kind = "other"
    order = None
    ropes = [i for i, _ in trace_rope if layer.idx < i < (layer.end or 0)]
    if qk and ropes:
        # each norm on its own: after when it reads a rotary output, before when a rotary call follows it
        # (Gemma 3n rotates q and k in two calls: q_norm, rope(q), k_norm, rope(k) is "before")
        orders = {"after" if r["_after_rope"] else "before" if any(i > r["_idx"] for i in ropes) else None
                  for r in qk}
        order = orders.pop() if len(orders) == 1 else None
    return kind, order


def build(model_type: str):
    from transformers.models.auto import configuration_auto as ca
    from transformers.models.auto import modeling_auto as ma
    import transformers

    cls_name = ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or ma.MODEL_MAPPING_NAMES.get(model_type)
    cfg_cls = ca.CONFIG_MAPPING[model_type]
    cls = getattr(transformers, cls_name)
    return cfg_cls, cls


def place(model_type: str, norm_types: tuple, class_catalog: dict, overrides: dict | None = None,
          observe=None) -> dict:
    """The census record of one model type (an ``error`` record when it cannot be built or traced).

    ``overrides`` (field -> value) are set on the default config (on its text part when the field lives there)
    before it is shrunk: :mod:`.variants` re-traces with one field changed. ``observe(trace)`` sees the trace."""
    rec = {"model_type": model_type, "config_class": None, "model_class": None, "status": "error", "error": None,
           "norm_classes": [], "catalog": [], "placement": None, "placement_note": None, "qk_norm": None,
           "qk_rope": None, "final_norm": None, "final_module": None, "extra_norms": [], "eps": None,
           "eps_attr": None, "layer": [], "source": None, "parallel": None}
    try:
        cfg_cls, cls = build(model_type)
        rec["config_class"], rec["model_class"] = cfg_cls.__name__, cls.__name__
        rec["source"] = sys.modules[cls.__module__].__file__.split("transformers/", 1)[-1]
        base = cfg_cls()
        top = {f: v for f, v in (overrides or {}).items() if f in vars(base)}
        if top:   # through the constructor, so that what it derives from the field follows
            base = cfg_cls(**top)
        for field, value in (overrides or {}).items():
            if field not in top:   # a field of a part: text_config, DBRX's attn_config, ...
                part = next(v for v in vars(base).values() if hasattr(v, "to_dict") and field in vars(v))
                setattr(part, field, value)
        rec["eps"], rec["eps_attr"] = config_eps(base)
        cfg = shrink(base)
        try:
            model, cfg = _instance(cls, cfg)
        except Exception as exc:   # a default config that leaves a needed size unset: fill it, else keep exc
            try:
                model, cfg = _instance(cls, shrink(base, fill=True))
            except Exception:
                raise exc from None
        langs = vars(cfg).get("languages")
        if hasattr(model, "set_default_language") and langs:   # X-MOD: an adapter per language, pick one
            model.set_default_language(langs[0])
        norm_types = tuple(set(norm_types) | {type(m) for m in model.modules() if is_norm_name(type(m).__name__)})
        text = vars(cfg).get("text_config") or cfg
        vocab = min(int(_get(text, "vocab_size") or 128), 128)
        rows = _get(text, "num_codebooks") or 1   # MusicGen's decoder reads one row per codebook
        ids = torch.randint(3, max(4, vocab - 1), (rows, TOKENS))
        tr = Trace(model, norm_types).run(rope_owner=sys.modules[cls.__module__], input_ids=ids)
        if observe is not None:
            observe(tr)
        prefix, n = _layers(tr)
        first = tr.model.get_submodule(f"{prefix}.0")
        hidden = _hidden(tr, prefix)
        heads = _get(text, "num_attention_heads")
        head_dim = _get(text, "head_dim") or (hidden // heads if isinstance(heads, int) and heads else None)
        rows, layer = classify_layer(tr, prefix, hidden, head_dim)
        others = [classify_layer(tr, prefix, hidden, head_dim, i) for i in range(1, n)]
        qk_rows, qk_layer = rows, layer
        if not any(r["role"].startswith(("q_", "k_")) for r in rows):
            qk_rows, qk_layer = next(((rs, ly) for rs, ly in others if any(r["role"].startswith(("q_", "k_"))
                                                                           for r in rs)), (rows, layer))
        last = next(c for c in tr.calls if c.name == f"{prefix}.{n - 1}")
        extra = []
        final = False
        for c in tr.calls:
            if not isinstance(c.module, norm_types) or c.name.startswith(prefix + "."):
                continue
            on_stream = c.x is not None and (same(c.x, last.y) or any(
                i > (last.end or 0) and i < c.idx and same(out, c.x) for i, _, out in tr.adds))
            if c.idx > (last.end or 0) and on_stream and c.x.shape[-1] == hidden and not final:
                final = True
                rows_final = {"module": c.name, "class": type(c.module).__name__}
                continue
            where = "embedding" if c.idx < layer.idx else "after the layers" if c.idx > (last.end or 0) else "between layers"
            extra.append(f"{where}: {c.name} ({type(c.module).__name__})")
        if not final:   # the last norm after the layers on the stream's width, read through a merge
            after = [c for c in tr.calls if isinstance(c.module, norm_types) and c.idx > (last.end or 0)
                     and not c.name.startswith(prefix + ".") and c.x is not None and c.x.shape[-1] == hidden]
            if after:
                final, rows_final = True, {"module": after[-1].name, "class": type(after[-1].module).__name__}
                extra.remove(f"after the layers: {after[-1].name} ({rows_final['class']})")
        for r in rows:
            if r["role"] in ("latent", "other"):
                extra.append(f"{r['role']}: {r['module']} ({r['class']})" + (f", {r['note']}" if r["note"] else ""))
        seen = {r["module"] for r in rows}
        for i, (rs, _) in enumerate(others, start=1):   # a hybrid's other kind of layer (linear attention)
            for r in rs:
                if r["role"] == "inner_output" and r["module"] not in seen:
                    seen.add(r["module"])
                    extra.append(f"inside a sub-layer of layer {i}: {r['module']} ({r['class']}), {r['note']}")
        classes = sorted({r["class"] for r in rows} | ({rows_final["class"]} if final else set()))
        rec.update({
            "status": "traced", "norm_classes": classes, "catalog": [class_catalog.get(c) for c in classes],
            "final_norm": final, "final_module": rows_final["module"] if final else None, "extra_norms": extra,
            "layer": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
        })
        rec["placement"], rec["placement_note"] = placement_of(rows)
        par = parallel_of(tr, prefix)
        rec["parallel"] = par is not None
        if par:
            words = ("one norm's output feeds both" if par == "shared"
                     else "each reads the layer's input through its own norm")
            note = f"parallel block: attention and MLP side by side ({words}), both outputs added to the stream"
            rec["placement_note"] = f"{rec['placement_note']}; {note}" if rec["placement_note"] else note
        rec["qk_norm"], rec["qk_rope"] = qk_of(qk_rows, tr.rope, qk_layer)
        differ = sorted({placement_of(rs)[0] for rs, _ in others} - {rec["placement"]})
        if differ:
            note = f"other layers: {', '.join(differ)}"
            rec["placement_note"] = f"{rec['placement_note']}; {note}" if rec["placement_note"] else note
        classes = sorted(set(classes) | {r["class"] for rs, _ in others for r in rs})
        rec["norm_classes"], rec["catalog"] = classes, [class_catalog.get(c) for c in classes]
        del first
    except Exception as exc:  # recorded, never dropped
        rec.update(status="error", error=_short(exc), placement=None, qk_norm=None, final_norm=None, layer=[],
                   norm_classes=[], catalog=[], extra_norms=[], parallel=None)
    return rec


def _instance(cls, cfg):
    """The tiny model (float32, eval) and the config it was built from: the config itself, else its text or
    decoder part (a causal-LM class of a composite config), else the config marked as a decoder (Reformer's LM
    head insists on it). When every way fails, the error raised is the text or decoder part's, if there is one
    (the class was most likely written for it), else the config's own."""
    parts = [vars(cfg)[k] for k in ("text_config", "decoder") if vars(cfg).get(k) is not None]
    tries = [cfg] + parts
    if getattr(cfg, "is_decoder", None) is False:
        as_decoder = copy.deepcopy(cfg)
        as_decoder.is_decoder = True
        tries.append(as_decoder)
    errors = []
    for c in tries:
        torch.manual_seed(0)
        try:
            return cls(c).float().eval(), c
        except Exception as exc:  # noqa: BLE001 - the next way is tried
            errors.append(exc)
    raise errors[1] if parts else errors[0]


def _get(cfg, name):
    """An attribute of a config, None when it is absent or ambiguous (per-layer attributes raise)."""
    try:
        v = getattr(cfg, name, None)
    except Exception:
        v = vars(cfg).get(name)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _hidden(tr: Trace, prefix: str) -> int:
    c = next(c for c in tr.calls if c.name == f"{prefix}.0")
    if c.x is None:
        raise RuntimeError(f"the decoder layer {prefix}.0 was called without a hidden-state tensor")
    return int(c.x.shape[-1])


def model_types() -> list[str]:
    """Every model type with a causal-LM class in the installed transformers' auto mapping, and the
    image-text-to-text types whose config is their own text model (described through their base model)."""
    from transformers.models.auto import configuration_auto as ca
    from transformers.models.auto import modeling_auto as ma

    causal = {t for t in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES if t in ca.CONFIG_MAPPING_NAMES}
    # an image-text-to-text model type without a causal-LM class and without a text part of its own config
    # (Chameleon): its text model is its base model, traced as it is. A sub-config that may be any model's
    # (AutoConfig: pi0's vlm_config) means the text model is another model type, traced under its own name
    def own(t):
        subs = getattr(ca.CONFIG_MAPPING[t], "sub_configs", {})
        return not set(subs) & {"text_config", "decoder"} and not any(c is ca.AutoConfig for c in subs.values())

    own_text = {t for t in ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES if t in ca.CONFIG_MAPPING_NAMES
                and t not in causal and t in ma.MODEL_MAPPING_NAMES and own(t)}
    return sorted(causal | own_text)
