"""Running one norm class on the shared probes and naming the catalog entry it equals, bit for bit.

For each class: build it at a few widths with its own constructor (the signature decides the arguments:
a width, a config object of its own model, one group, ...), read how it stores its gain (none, ``w``, or an
offset ``w`` applied as ``1 + w``; its dtype; a bias), decide what it computes from its outputs (a LayerNorm
ignores a shift of the row, an RMSNorm gives rows of mean square one, an L2 norm rows of length one), then
feed it :func:`reference_impl.check.matching.make_probes` in bfloat16, float16 and float32 (gains in
float32 and in the input's dtype, at scales where eps decides the result and where float16 squares
overflow) and compare its outputs with every catalog candidate by :func:`~reference_impl.check.matching.match`.
A class whose forward takes a ``gate`` is a gated norm: it gets probes with a random gate in x's dtype and is
compared with the gated entries (kind ``"gated_rms"``); a class is matched only when one candidate equals it
bit for bit on every probe of every dtype tried.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import torch

from ...check import matching
from .discover import Found, out_of_scope_reason

WIDTHS = (7, 64)           # an odd width and a head size
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_WIDTH_ARGS = ("hidden_size", "dim", "normalized_shape", "size", "d_model", "num_features", "feat_size", "n",
               "hidden_dim", "features", "embed_dim", "c_in", "d", "n_embd", "num_channels", "head_dim",
               "normalized_dim", "channels", "d_hidden", "in_features")
_CONFIG_WIDTHS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "head_dim", "hidden_dim", "d_embed",
                  "kv_lora_rank", "q_lora_rank")
_GAIN_NAMES = ("weight", "scale", "gamma", "g", "gain")
_BIAS_NAMES = ("bias", "beta", "b")
_ONE_PLUS = re.compile(r"1(\.0)?\s*\+\s*self\.(weight|scale|gamma)|self\.(weight|scale|gamma)(\.float\(\))?\s*\+\s*1"
                       r"|unit_offset|weight_offset|\+\s*self\.offset")


class ProbeError(Exception):
    """The class could not be built or run on a plain ``(rows, width)`` input; the message says why."""


def _config_for(found: Found, annotation, width: int):
    """A default config of the class's own model with its width fields set to ``width``."""
    cls = annotation if isinstance(annotation, type) else None
    if cls is None and found.folder:
        import importlib
        import pkgutil

        import transformers

        pkg = importlib.import_module(f"transformers.models.{found.folder}")
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name.startswith("configuration_"):
                mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
                for obj in vars(mod).values():
                    if isinstance(obj, type) and issubclass(obj, transformers.PreTrainedConfig) \
                            and obj.__module__ == mod.__name__:
                        cls = obj
                        break
            if cls is not None:
                break
    if cls is None:
        raise ProbeError("takes a config, and no config class was found in its model folder")
    cfg = cls()
    for sub in ("text_config",):
        if getattr(cfg, sub, None) is not None:
            cfg = getattr(cfg, sub)
    for name in _CONFIG_WIDTHS:
        if hasattr(cfg, name):
            setattr(cfg, name, width)
    for name in ("num_attention_heads", "num_heads", "n_head"):
        if hasattr(cfg, name):
            setattr(cfg, name, 1)
    return cfg


def build(found: Found, width: int, eps: float | None = None, heads: int = 1,
          extra: dict | None = None) -> torch.nn.Module:
    """The class built for rows of ``width`` features, in float32 (parameters as its constructor makes them).

    ``heads``: the value given to a head count the constructor takes (``num_heads``); above one, a subclass of
    ``torch.nn.LayerNorm`` whose constructor refuses one width is built with the shape ``(heads, width)``, as
    ``normalized_shape`` allows (a per-head norm: see :func:`per_head_layout`). ``extra``: constructor
    arguments given as they are, over any generic choice (the values a model passes from its config)."""
    cls = found.cls
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError) as exc:
        raise ProbeError(f"its constructor's signature cannot be read: {exc}") from exc
    args, kwargs = [], {}
    extra = extra or {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in extra:
            value = extra[p.name]
        elif p.name in _WIDTH_ARGS:
            value = width
        elif p.name == "config":
            value = _config_for(found, p.annotation, width)
        elif p.name in ("group_size",):
            value = width
        elif p.name in ("num_heads",):
            value = heads
        elif p.name in ("n_groups", "num_groups"):
            value = 1
        elif p.name in ("eps", "epsilon") and eps is not None:
            value = eps
        elif p.default is not p.empty:
            continue
        else:
            raise ProbeError(f"its constructor needs {p.name!r}, which no generic strategy provides")
        if p.kind == p.POSITIONAL_ONLY:
            args.append(value)
        else:  # by name: a default skipped before it must not shift it
            kwargs[p.name] = value
    width_given = any(p.name in _WIDTH_ARGS for p in params)
    if not width_given and any(p.kind == p.VAR_POSITIONAL for p in params):
        args.insert(0, width)   # a subclass that passes *args on (to nn.LayerNorm's normalized_shape)
    try:
        module = cls(*args, **kwargs)
    except Exception as exc:
        shaped = _shape_retry(cls, params, args, kwargs, width, heads)
        if shaped is None:
            raise ProbeError(f"constructor failed: {type(exc).__name__}: {exc}"[:300]) from exc
        module = shaped
    return module.float().eval()


def _shape_retry(cls, params, args, kwargs, width, heads):
    """A ``torch.nn.LayerNorm`` subclass built with the shape ``(heads, width)`` in place of its width (its
    ``normalized_shape`` takes a shape), or None when that is not the case or fails too."""
    if heads < 2 or not issubclass(cls, torch.nn.LayerNorm):
        return None
    names = [p.name for p in params if p.name in _WIDTH_ARGS and p.name in kwargs]
    if names:
        kwargs = {**kwargs, names[0]: (heads, width)}
    elif args and args[0] == width:
        args = [(heads, width), *args[1:]]
    else:
        return None
    try:
        return cls(*args, **kwargs)
    except Exception:
        return None


def _param(module, names, width):
    for name in names:
        t = getattr(module, name, None)
        if isinstance(t, torch.nn.Parameter) and t.shape == (width,):
            return name, t
    return None, None


@dataclass
class Storage:
    gain: str            # "none" | "w" | "1+w" | "other"
    gain_name: str | None
    bias_name: str | None
    eps: float | None
    offset: bool = False  # probes carry the gain g; the class stores g - 1 (exact for g in [0.5, 2])


def storage(found: Found, module: torch.nn.Module, width: int) -> Storage:
    """How the built class stores its gain and bias, and its eps (the signature's, else the instance's,
    else a literal in its forward)."""
    gname, g = _param(module, _GAIN_NAMES, width)
    bname, _ = _param(module, _BIAS_NAMES, width)
    try:
        src = inspect.getsource(found.cls)
    except (OSError, TypeError):
        src = ""
    if g is None:
        others = [n for n, t in module.named_parameters(recurse=False)]
        gain = "other" if others else "none"
    elif _ONE_PLUS.search(src):
        gain = "1+w"
    else:
        gain = "w"
    eps = found.eps_default
    if eps is None:
        for name in ("variance_epsilon", "eps", "epsilon"):
            v = getattr(module, name, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                eps = float(v)
                break
    if eps is None:  # a norm built around a torch module (nn.LayerNorm(..., elementwise_affine=False))
        for sub in module.modules():
            v = getattr(sub, "eps", None)
            if sub is not module and isinstance(v, float):
                eps = v
                break
    if eps is None:
        m = re.search(r"eps\s*=\s*([0-9.]+e-?[0-9]+|[0-9]*\.[0-9]+)", src)
        if m:
            eps = float(m.group(1))
    return Storage(gain, gname, bname, eps)


def _set(module, st: Storage, weight, bias):
    with torch.no_grad():
        if st.gain_name is not None and weight is not None:
            w = weight - 1 if st.offset else weight
            if st.offset and not torch.equal(w + 1, weight):
                raise ProbeError("the gain g - 1 is not exact in the weight's dtype")
            getattr(module, st.gain_name).data = w.clone()
        if st.bias_name is not None:
            b = getattr(module, st.bias_name)
            b.data = (torch.zeros_like(b) if bias is None else bias.clone())


def needs_gate(cls) -> bool:
    """Whether the class's forward takes a ``gate`` (a gated norm: probed with a random gate of x's dtype)."""
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False
    return "gate" in params


def _call(module, x, gate=None):
    return _call_plain(module, x, gate)


def _call_plain(module, x, gate=None):
    out = module(x) if gate is None else module(x, gate=gate)
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        raise ProbeError(f"returns {type(out).__name__} {tuple(getattr(out, 'shape', ()))} for an input "
                         f"{tuple(x.shape)}: not a norm over the last dimension")
    return out


def kind_of(module, st: Storage, width: int) -> str:
    """What the class computes, from its outputs on float32 rows with a neutral gain and no bias."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, width, generator=g, dtype=torch.float64).float() * 3
    neutral = None
    if st.gain_name is not None:
        ref = getattr(module, st.gain_name)
        neutral = torch.zeros_like(ref) if st.gain == "1+w" else torch.ones_like(ref)
    _set(module, st, neutral, None)
    with torch.no_grad():
        y = _call(module, x).double()
        y_shift = _call(module, x + 2.5).double()
    if torch.allclose(y, y_shift, atol=1e-4, rtol=1e-4):
        return "layer"
    ms = (y * y).mean(-1)
    ss = (y * y).sum(-1)
    if torch.allclose(ms, torch.ones_like(ms), atol=1e-3):
        return "rms"
    if torch.allclose(ss, torch.ones_like(ss), atol=1e-3):
        return "l2"
    return "other"


@dataclass
class ClassResult:
    kind: str
    in_scope: bool
    reason: str | None
    catalog: str | None
    closest: str | None
    max_ulp: int | None
    eps: float | None
    gain: str
    gain_dtype: str | None
    bias: bool
    dtypes: list
    note: str | None


def _fail(found, kind, reason, eps=None, gain="none", bias=False, gain_dtype=None, in_scope=False, note=None):
    return ClassResult(kind, in_scope, reason, None, None, None, eps if eps is not None else found.eps_default,
                       gain, gain_dtype, bias, [], note)


def _name_kind(name: str) -> str:
    n = name.lower()
    if "rms" in n:
        return "rms"
    if "l2" in n:
        return "l2"
    if "layernorm" in n:
        return "layer"
    return "other"


def probe_class(found: Found, widths=WIDTHS, dtypes=DTYPES, extra: dict | None = None) -> ClassResult:
    """Everything the census records about one class (see the module docstring); ``extra``: constructor
    arguments to build it with (see :func:`build`)."""
    oos = out_of_scope_reason(found.name)
    if oos is not None:
        return _fail(found, _name_kind(found.name), oos)
    eps_arg = 1e-6 if found.cls is torch.nn.RMSNorm else None  # its default (None) picks eps by dtype
    try:
        modules = {d: build(found, d, eps_arg, extra=extra) for d in widths}
        st = storage(found, modules[widths[-1]], widths[-1])
        gated = needs_gate(found.cls)
        if gated:  # a gated norm's output is not a normalized row: compared with the gated entries
            kind = "gated_rms" if _name_kind(found.name) == "rms" else "other"
        else:
            shape_reason = _not_rowwise(modules[widths[-1]], widths[-1])
            if shape_reason:
                return _per_head_or(found, widths, dtypes, _fail(found, _name_kind(found.name), shape_reason))
            kind = kind_of(modules[widths[-1]], st, widths[-1])
    except ProbeError as exc:
        return _per_head_or(found, widths, dtypes,
                            _fail(found, _name_kind(found.name), f"could not be probed: {exc}", in_scope=True))
    except Exception as exc:  # a forward that needs more than one tensor (a gate, a mask, a condition)
        return _per_head_or(found, widths, dtypes, _fail(
            found, _name_kind(found.name),
            f"could not be probed on one (rows, width) tensor: {type(exc).__name__}: {exc}"[:300], in_scope=True))
    gain_t = getattr(modules[widths[-1]], st.gain_name) if st.gain_name else None
    gain_dtype = str(gain_t.dtype).replace("torch.", "") if gain_t is not None else None
    eps = eps_arg if eps_arg is not None else st.eps
    common = dict(eps=eps, gain=st.gain, bias=st.bias_name is not None, gain_dtype=gain_dtype)
    if kind == "other":
        return _fail(found, "other", "does not normalize each row to unit mean square, unit length or zero "
                     "mean and unit variance", in_scope=True, **common)
    if st.gain == "other":
        return _fail(found, kind, "stores its gain in a shape other than (width,)", in_scope=True, **common)
    probe_gain = st.gain
    if kind == "layer" and st.gain == "1+w":   # the catalog's LayerNorms take the gain itself: store g - 1
        probe_gain = "w"
        st.offset = True
    ran, probes = [], []
    for dt in dtypes:
        # torch.nn.LayerNorm's kernel (the neox candidate) takes a gain in x's dtype only
        wdts = [dt] if kind == "layer" else sorted({torch.float32, dt}, key=str)
        ps = matching.make_probes(list(widths), [dt], wdts, gain=probe_gain, gate=gated,
                                  bias=st.bias_name is not None, eps=eps if eps is not None else 1e-6)
        try:
            for p in ps[:1]:
                _run_on(modules, st, p)
            ran.append(dt)
            probes.extend(ps)
        except Exception:
            continue
    if not probes:
        return _fail(found, kind, "raises on every input dtype tried", in_scope=True, **common)

    def run(p):
        return _run_on(modules, st, p)

    m = matching.match(run, probes, kind)
    note = None if eps is not None else "no eps found in its signature, instance or source; probed with 1e-6"
    if st.offset:
        note = ((note + "; ") if note else "") + "stores w and applies 1 + w; probed with the gain g stored as g - 1 " \
            "(exact for the probes' gains)"
    if gated:
        note = ((note + "; ") if note else "") + "gated: probed with a random gate in x's dtype (N(0, 3^2))" + \
            _gate_defaults(found.cls, extra)
    if eps_arg is not None:
        note = "built with eps=1e-6 (its default, None, picks eps by dtype)"
    if len(ran) < len(dtypes):
        skipped = ", ".join(str(d).replace("torch.", "") for d in dtypes if d not in ran)
        note = ((note + "; ") if note else "") + f"raises for {skipped} input"
    closest_ulp = m.max_ulp.get(m.closest) if m.closest else None
    dts = [str(d).replace("torch.", "") for d in ran]
    return ClassResult(kind, True, None, m.matched, m.closest if not m.matched else m.matched,
                       None if m.matched else closest_ulp, eps, st.gain, gain_dtype, st.bias_name is not None,
                       [str(d).replace("torch.", "") for d in ran], note if m.matched else
                       ((note + "; ") if note else "") + m.description)


def _gate_defaults(cls, extra=None) -> str:
    """The constructor defaults that decide where the gate goes (Falcon-H1's ``norm_before_gate``)."""
    if extra and "norm_before_gate" in extra:
        return f", built with norm_before_gate={extra['norm_before_gate']!r}"
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return ""
    p = params.get("norm_before_gate")
    if p is None or p.default is p.empty:
        return ""
    return f", built with its default norm_before_gate={p.default!r}"


def _not_rowwise(module, width) -> str | None:
    """A reason when the class does not map (rows, width) to a normalized (rows, width)."""
    x = torch.randn(5, width, generator=torch.Generator().manual_seed(3))
    try:
        with torch.no_grad():
            out = module(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
    except Exception:
        out = None
    if isinstance(out, torch.Tensor) and out.shape == (5, 1):
        return "returns each row's inverse RMS (a statistic the model multiplies in later), not a normalized tensor"
    if isinstance(out, torch.Tensor) and out.shape == x.shape:
        return None
    for shape in ((2, width, 3, 3), (2, width, 5)):
        try:
            with torch.no_grad():
                y = module(torch.randn(*shape, generator=torch.Generator().manual_seed(4)))
        except Exception:
            continue
        if isinstance(y, torch.Tensor) and y.shape == shape:
            return f"normalizes over the channel dimension of a channels-first {len(shape)}-d tensor (image or audio)"
    return None


def _run_on(modules, st: Storage, p):
    module = modules[p.x.shape[-1]]
    _set(module, st, p.weight, p.bias)
    with torch.no_grad():
        return _call(module, p.x, p.gate)


# ------------------------------------------------------------------ per-head classes

HEADS = 2   # a per-head class is built for two heads: a gain applied to the wrong head then changes the bits


@dataclass
class HeadLayout:
    """Where a per-head class keeps its gains: one ``(heads, head_dim)`` tensor (``gain``/``bias`` names), or a
    ``torch.nn.ModuleList`` of one norm per head (``per_module``: the list's name)."""
    heads: int
    gain_name: str | None
    bias_name: str | None
    per_module: str | None = None

    def set(self, module, weight, bias):
        with torch.no_grad():
            if self.per_module is None:
                if self.gain_name is not None:
                    getattr(module, self.gain_name).data = weight.clone()
                if self.bias_name is not None:
                    b = getattr(module, self.bias_name)
                    b.data = torch.zeros_like(b) if bias is None else bias.clone()
                return
            for h, sub in enumerate(getattr(module, self.per_module)):
                if self.gain_name is not None:
                    getattr(sub, self.gain_name).data = weight[h].clone()
                if self.bias_name is not None:
                    b = getattr(sub, self.bias_name)
                    b.data = torch.zeros_like(b) if bias is None else bias[h].clone()


def per_head_layout(module: torch.nn.Module, width: int) -> HeadLayout | None:
    """The layout of a class built with :data:`HEADS` heads of ``width`` features: a gain of shape
    ``(heads, width)``, or a list of ``heads`` norms each with a ``(width,)`` gain; None for any other class."""
    own = dict(module.named_parameters(recurse=False))
    gain = next((n for n in _GAIN_NAMES if n in own and own[n].shape == (HEADS, width)), None)
    if gain is not None:
        bias = next((n for n in _BIAS_NAMES if n in own and own[n].shape == (HEADS, width)), None)
        return HeadLayout(HEADS, gain, bias)
    for name, child in module.named_children():
        if isinstance(child, torch.nn.ModuleList) and len(child) == HEADS:
            gains = [_param(sub, _GAIN_NAMES, width) for sub in child]
            if all(t is not None for _, t in gains) and len({n for n, _ in gains}) == 1:
                biases = {_param(sub, _BIAS_NAMES, width)[0] for sub in child}
                return HeadLayout(HEADS, gains[0][0], biases.pop() if len(biases) == 1 else None, name)
    return None


def _head_probe(p, heads):
    """A probe of ``(rows, heads * head_dim)`` viewed as ``(rows, heads, head_dim)``, its gain and bias as
    ``(heads, head_dim)``."""
    import dataclasses

    rows, width = p.x.shape
    d = width // heads
    view = (lambda t: None if t is None else t.reshape(heads, d))
    return dataclasses.replace(p, x=p.x.reshape(rows, heads, d), weight=view(p.weight), bias=view(p.bias),
                               label=p.label + f", viewed ({rows}, {heads}, {d})")


def probe_per_head(found: Found, widths=WIDTHS, dtypes=DTYPES) -> ClassResult | None:
    """A class that normalizes each head of a ``(rows, heads, head_dim)`` input over ``head_dim`` with a gain
    per head, built for :data:`HEADS` heads of each width (its constructor decides how: a head count, or a
    ``(heads, head_dim)`` shape), probed on the shared probes viewed that way and matched against the catalog's
    per-head entries (kind ``"layer_per_head"``); None when the class is not such a norm."""
    try:
        modules = {d: build(found, d, None, heads=HEADS) for d in widths}
    except ProbeError:
        return None
    layouts = {d: per_head_layout(m, d) for d, m in modules.items()}
    if any(lay is None for lay in layouts.values()):
        return None
    d0 = widths[-1]
    lay, module = layouts[d0], modules[d0]
    x = torch.randn(5, HEADS, d0, generator=torch.Generator().manual_seed(5)) * 3
    lay.set(module, torch.ones(HEADS, d0), None)
    try:
        with torch.no_grad():
            y, y_shift = _call(module, x).double(), _call(module, x + 2.5).double()
    except Exception:
        return None
    if not torch.allclose(y, y_shift, atol=1e-4, rtol=1e-4):
        return None     # not a LayerNorm per head: no per-head entry to compare with
    try:
        src = inspect.getsource(found.cls)
    except (OSError, TypeError):
        src = ""
    gain = "1+w" if _ONE_PLUS.search(src) else "w"
    eps = storage(found, module, d0).eps
    gain_t = getattr(module, lay.gain_name) if lay.per_module is None else \
        getattr(getattr(module, lay.per_module)[0], lay.gain_name)
    common = dict(eps=eps, gain=gain, bias=lay.bias_name is not None,
                  gain_dtype=str(gain_t.dtype).replace("torch.", ""))
    if gain != "w":
        return _fail(found, "layer_per_head", "stores a per-head offset gain (1 + w), which no per-head entry has",
                     in_scope=True, **common)

    def run(p):
        m = modules[p.x.shape[-1]]
        layouts[p.x.shape[-1]].set(m, p.weight, p.bias)
        with torch.no_grad():
            return _call(m, p.x)

    ran, probes = [], []
    for dt in dtypes:   # nn.LayerNorm's kernel takes a gain in x's dtype only, as for the plain LayerNorms
        ps = [_head_probe(p, HEADS) for p in matching.make_probes(
            [HEADS * d for d in widths], [dt], [dt], gain="w", bias=lay.bias_name is not None,
            eps=eps if eps is not None else 1e-5)]
        try:
            run(ps[0])
        except Exception:
            continue
        ran.append(dt)
        probes.extend(ps)
    if not probes:
        return _fail(found, "layer_per_head", "raises on every input dtype tried", in_scope=True, **common)
    m = matching.match(run, probes, "layer_per_head")
    note = (f"a norm per head: built for {HEADS} heads of each width and fed (rows, heads, head_dim), its gain"
            f"{' and bias' if lay.bias_name else ''} ({HEADS}, head_dim)")
    if len(ran) < len(dtypes):
        note += "; raises for " + ", ".join(str(d).replace("torch.", "") for d in dtypes if d not in ran) + " input"
    return ClassResult("layer_per_head", True, None, m.matched, m.matched or m.closest,
                       None if m.matched else m.max_ulp.get(m.closest), eps, gain, common["gain_dtype"],
                       common["bias"], [str(d).replace("torch.", "") for d in ran],
                       note if m.matched else note + "; " + m.description)


def _per_head_or(found, widths, dtypes, failed: ClassResult) -> ClassResult:
    """The class probed as a per-head norm (:func:`probe_per_head`) where it is one, else ``failed``."""
    r = probe_per_head(found, widths, dtypes)
    return failed if r is None else r
