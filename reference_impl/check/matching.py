"""Which catalog convention a norm function equals, bit for bit: the one mechanism the kit, the census and
the conformance study share.

- :func:`ulp_distance` counts representable values between two tensors of one dtype;
- :func:`make_probes` builds inputs that separate the conventions: odd and even widths, gains stored in the
  checkpoint's dtype or in float32, rows so small that eps decides the result, rows large enough that a
  float16 square would overflow;
- :func:`candidates` runs every catalog entry of a kind, with eps inside and outside the root: the kinds,
  candidates, their order and their sentences all come from the catalog (an entry declares ``match_kind``,
  ``match_run``, ``match_variants``, ``match_rank`` and ``match_description`` on its
  :class:`~reference_impl.norms.spec.NormSpec`), so a new entry is a candidate without an edit here;
- :func:`match` runs a function on the probes and names the entry it equals on every probe, or the
  closest one with its largest distance in ulps.

Calling protocol of a candidate (and of the ``run`` given to :func:`match`): ``run(probe) -> Tensor`` (or a
tuple of tensors for the fused residual add: ``(normalized, new_residual)``). A candidate that does not apply
to a probe (Gemma's ``(1 + w)`` order on a plain gain) raises :class:`NotApplicable` and is skipped there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..norms.spec import NotApplicable  # re-exported: a candidate that does not apply to a probe

GAINS = ("none", "w", "1+w")
HUGE = 1 << 62  # the distance of a NaN from a number

_INT = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float16: (torch.int16, 0x7FFF),
        torch.float32: (torch.int32, 0x7FFFFFFF), torch.float64: (torch.int64, 0x7FFFFFFFFFFFFFFF)}


# ------------------------------------------------------------------------------------------ ulps

def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Each value's position on the number line of its dtype (+0 and -0 both 0): neighbours differ by 1."""
    if t.dtype not in _INT:
        raise TypeError(f"ulp distances are defined for float16, bfloat16, float32 and float64, got {t.dtype}")
    ity, mag = _INT[t.dtype]
    bits = t.detach().contiguous().view(ity).to(torch.int64)
    return torch.where(bits < 0, -(bits & mag), bits)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int64 per element: how many representable values of the dtype separate ``a`` and ``b`` (0: equal).

    ``a`` and ``b`` must have one dtype and one shape. +0 and -0 are equal; NaN against NaN counts 0, NaN
    against a number :data:`HUGE`. Infinities sit one step past the largest finite value.
    """
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"ulp_distance compares two tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance compares one dtype, got {a.dtype} and {b.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"ulp_distance compares one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.detach().cpu(), b.detach().cpu()
    d = (ordered_bits(a) - ordered_bits(b)).abs()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, HUGE), d)


# ------------------------------------------------------------------------------------------ probes

@dataclass
class Probe:
    """One input of the norm: ``x`` ``(rows, width)`` (or a strided view of a wider tensor), the stored
    ``weight`` ``(width,)`` (the gain itself for ``gain="w"``, the offset from one for ``gain="1+w"``, None for
    ``"none"``), ``bias`` ``(width,)`` or None, ``eps`` (where it goes is the function's business), and for
    the fused residual add the ``residual`` ``(rows, width)`` in x's dtype; for a gated norm the ``gate``
    ``(rows, width)`` in x's dtype."""

    x: torch.Tensor
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float
    label: str
    gain: str = "w"
    residual: torch.Tensor | None = None
    scale: float = 1.0
    gate: torch.Tensor | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.x.dtype

    @property
    def weight_dtype(self) -> torch.dtype | None:
        return None if self.weight is None else self.weight.dtype

    def effective_gain(self) -> torch.Tensor | None:
        """The gain the math applies, in float32 (float64 for a float64 weight): ``w`` or ``1 + w``."""
        if self.weight is None:
            return None
        w = self.weight.double() if self.weight.dtype == torch.float64 else self.weight.float()
        return 1.0 + w if self.gain == "1+w" else w


def dtype_name(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float64: "fp64"}.get(
        dtype, str(dtype).replace("torch.", ""))


def make_probes(width_list, dtypes, weight_dtypes, *, gain: str, bias: bool, eps: float,
                scales=(1e-4, 1.0, 300.0), seed: int = 0, rows: int = 4, residual: bool = False,
                noncontiguous: bool = False, gate: bool = False) -> list[Probe]:
    """Every combination of width, x dtype, weight dtype and scale, as :class:`Probe` s.

    ``x = scale * N(0, 1)`` rounded once to the dtype: with scale ``1e-4`` the mean square (1e-8) is below a
    typical eps (1e-6), so eps decides the output; with scale 300 a float16 ``x * x`` overflows unless it is
    accumulated in float32. The gain is stored as the model class stores it, rounded to the weight dtype:
    ``"w"``: ``1 + N(0, 0.1^2)``; ``"1+w"``: the offset ``N(0, 0.5^2)`` (Gemma's weights start at 0);
    ``"none"``: no weight. ``bias``: ``N(0, 0.3^2)``. ``residual``: ``N(0, 4^2)`` in x's dtype (the stream is
    larger than a block's output deep in a model). ``noncontiguous``: x is every other column of a tensor
    twice as wide. ``gate``: ``N(0, 3^2)`` in x's dtype, drawn after everything else (so the other
    tensors do not change): most values in [-6, 6], where silu and sigmoid are far from linear, from 0 and
    from 1, so a gate applied with the wrong activation or at the wrong place changes the bits. The same
    seed gives the same probes.
    """
    if gain not in GAINS:
        raise ValueError(f"gain must be one of {GAINS}, got {gain!r}")
    widths = list(width_list)
    if not widths or any(not isinstance(d, int) or d < 1 for d in widths):
        raise ValueError(f"width_list must hold positive ints, got {width_list!r}")
    wdts = [None] if gain == "none" else list(weight_dtypes)
    out = []
    for d in widths:
        for dt in dtypes:
            for wdt in wdts:
                for scale in scales:
                    g = torch.Generator().manual_seed(seed + 7919 * d + int(1e6 * scale) % 9973)
                    full = torch.randn(rows, 2 * d if noncontiguous else d, generator=g, dtype=torch.float64)
                    x = (scale * full).to(dt)
                    x = x[:, ::2] if noncontiguous else x
                    w = None
                    if wdt is not None:
                        base = 0.5 * torch.randn(d, generator=g, dtype=torch.float64) if gain == "1+w" else \
                            1.0 + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)
                        w = base.to(wdt)
                    b = (0.3 * torch.randn(d, generator=g, dtype=torch.float64)).to(wdt or dt) if bias else None
                    r = (4.0 * torch.randn(rows, d, generator=g, dtype=torch.float64)).to(dt) if residual else None
                    z = (3.0 * torch.randn(rows, d, generator=g, dtype=torch.float64)).to(dt) if gate else None
                    label = (f"{dtype_name(dt)} x, {'no' if wdt is None else dtype_name(wdt)} w, ({rows}, {d}), "
                             f"scale {scale:g}" + (", strided" if noncontiguous else ""))
                    out.append(Probe(x, w, b, float(eps), label, gain, r, float(scale), z))
    return out


# ------------------------------------------------------------------------------------------ candidates

# the variant options that are the candidate's own fields (also passed to the entry's match_run)
_FIELDS = ("convention", "placement", "folded")


@dataclass(frozen=True)
class Candidate:
    name: str            # display name, e.g. "rms_norm.llama (eps outside)"
    entry: str           # the catalog entry
    convention: str
    placement: str = "inside"
    folded: bool = False  # for a (1 + w) probe: the gain rounded to the weight's dtype before use
    options: tuple = ()   # the variant's keyword options for its spec's match_run
    description: str = ""

    def describe(self) -> str:
        desc = self.description or _sentence(self.entry, self.convention)
        if self.placement == "outside":
            desc += "; eps outside the root, x / (rms + eps)"
        if self.folded:
            desc += "; with the gain 1 + w rounded to the weight's dtype first"
        return desc + "".join(f"; {k} {v}" for k, v in self.options if k not in _FIELDS)


def _entry_sentence(spec, convention: str) -> str:
    d = spec.match_description
    return d.get(convention, "") if isinstance(d, dict) else d


def _sentence(entry: str, convention: str) -> str:
    """A Candidate built by name (the kit's): the entry's own sentence, else that of the first candidate
    declaring the convention, else the entry's name."""
    from ..norms import CATALOG

    if entry in CATALOG and _entry_sentence(CATALOG[entry], convention):
        return _entry_sentence(CATALOG[entry], convention)
    for kind in kinds():
        for c in _declared(kind):
            if c.convention == convention and c.description:
                return c.description
    return entry


def _runner(c: Candidate, kind: str) -> Callable[[Probe], torch.Tensor]:
    """``run(probe)`` of a candidate: its entry's ``match_run`` with the variant's options (``kind`` is
    the candidate's kind, kept for callers)."""
    from ..norms import CATALOG

    spec = CATALOG[c.entry]
    opts = dict(c.options)
    return lambda p: spec.match_run(p, **opts)


def kinds() -> tuple:
    """Every kind of norm the catalog offers candidates for, by the rank of each kind's most preferred
    entry (then name)."""
    from ..norms import CATALOG

    best: dict[str, int] = {}
    for s in CATALOG.values():
        if s.match_kind:
            best[s.match_kind] = min(best.get(s.match_kind, s.match_rank), s.match_rank)
    return tuple(sorted(best, key=lambda k: (best[k], k)))


def _declared(kind: str) -> list[Candidate]:
    """The candidates the catalog's specs declare for ``kind`` (``NormSpec.match_kind``), by ``match_rank``
    then name; one per ``match_variants`` entry ``(suffix, options)``, named ``entry`` followed by each
    part of the suffix (a str or a tuple of str) in parentheses, or joined as is when it starts with "."
    ("fused_add_rms_norm.llama"). The options ``convention`` (default: the entry's name), ``placement``
    (default "inside") and ``folded`` (default False) are the candidate's fields; all options go to
    ``match_run``."""
    from ..norms import CATALOG

    specs = sorted((s for s in CATALOG.values() if s.match_kind == kind), key=lambda s: (s.match_rank, s.name))
    out = []
    for s in specs:
        if s.match_run is None:
            raise ValueError(f"catalog entry {s.name!r} declares match_kind {kind!r} but no match_run")
        for suffix, opts in (s.match_variants or (("", {}),)):
            parts = (suffix,) if isinstance(suffix, str) else tuple(suffix)
            name = s.name + "".join(x if x.startswith(".") else f" ({x})" for x in parts if x)
            conv = opts.get("convention", s.name)
            out.append(Candidate(name, s.name, conv, opts.get("placement", "inside"), bool(opts.get("folded", False)),
                                 options=tuple(sorted(opts.items())),
                                 description=_entry_sentence(s, conv) or s.title))
    return out


def candidate_list(kind: str) -> list[Candidate]:
    """The candidates of a kind, in preference order: every entry that declares ``match_kind == kind``, by
    ``match_rank`` (the families' orders first, then the core orders, then the rest)."""
    known = kinds()
    if kind not in known:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(known)}")
    return _declared(kind)


def candidates(kind: str) -> dict[str, Callable[[Probe], torch.Tensor]]:
    """Display name -> ``run(probe)``: every catalog entry of ``kind`` ("rms", "layer", "l2",
    "fused_add_rms"), for each eps placement it supports. The "(1 + w folded)" entries apply a non-Gemma
    order to the gain ``1 + w`` rounded to the weight's dtype (as an exported checkpoint may store it); they
    run on ``1+w`` probes only."""
    return {c.name: _runner(c, kind) for c in candidate_list(kind)}


# ------------------------------------------------------------------------------------------ matching

@dataclass
class Match:
    """What :func:`match` found. ``matched``: the first candidate equal bit for bit on every probe it applies
    to (None: none); ``all_matched``: every such candidate; ``closest``: the candidate with the smallest
    largest distance; ``max_ulp``: per candidate, the largest distance over all probes; ``description``: a
    sentence saying what the function does."""

    matched: str | None
    closest: str | None
    max_ulp: dict[str, int]
    description: str
    all_matched: list[str] = field(default_factory=list)
    per_probe: dict[str, list[int]] = field(default_factory=dict)
    by_dtype: dict[str, list[str]] = field(default_factory=dict)  # x dtype -> candidates equal on its probes


def _as_tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


def distance(got, want) -> int:
    """The largest ulp distance between two outputs (tuples compared part by part), in ``got``'s dtype:
    ``want`` is rounded to it when the dtypes differ. A shape mismatch counts :data:`HUGE`."""
    worst = 0
    g_parts, w_parts = _as_tuple(got), _as_tuple(want)
    if len(g_parts) != len(w_parts):
        return HUGE
    for g, w in zip(g_parts, w_parts):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype not in _INT:
            return HUGE
        if g.numel() == 0:
            continue
        worst = max(worst, int(ulp_distance(g, w.to(g.dtype)).max()))
    return worst


def describe(name: str, kind: str = "rms") -> str:
    for c in candidate_list(kind):
        if c.name == name:
            return c.describe()
    return name


def match(run: Callable[[Probe], torch.Tensor], probes, kind: str, prefer=None) -> Match:
    """Run ``run`` on every probe and compare it with every candidate of ``kind``.

    ``prefer``: candidate names to list first when several match (e.g. the convention a model expects). An
    exception from ``run`` propagates (the caller reports it). Outputs are compared in ``run``'s dtype.
    """
    cands = candidate_list(kind)
    if prefer:
        rank = {}
        for n in prefer:
            rank.setdefault(n, len(rank))
        cands.sort(key=lambda c: rank.get(c.name, len(rank)))
    runners = {c.name: _runner(c, kind) for c in cands}
    per = {c.name: [] for c in cands}
    groups: dict[str, dict[str, int]] = {}
    with torch.no_grad():
        for p in probes:
            got = run(p)
            grp = groups.setdefault(dtype_name(p.dtype), {})
            for c in cands:
                try:
                    want = runners[c.name](p)
                except (NotApplicable, TypeError, ValueError):  # a reference that refuses this input
                    continue
                d = distance(got, want)
                per[c.name].append(d)
                grp[c.name] = max(grp.get(c.name, 0), d)
    max_ulp = {n: max(v) for n, v in per.items() if v}
    equal = [n for n in max_ulp if max_ulp[n] == 0]
    # closest: equal on the most probes, then the smallest largest distance
    closest = min(max_ulp, key=lambda n: (-sum(d == 0 for d in per[n]), max_ulp[n])) if max_ulp else None
    by_dtype = {dn: [n for n in max_ulp if n in grp and grp[n] == 0] for dn, grp in groups.items()}
    by_name = {c.name: c for c in cands}
    if equal:
        desc = by_name[equal[0]].describe()
        if len(equal) > 1:
            desc += f" (on these inputs also equal to {', '.join(equal[1:])})"
    elif closest is not None:
        hits = sum(d == 0 for d in per[closest])
        desc = (f"equals no catalog convention on every input; the closest is {closest} "
                f"({by_name[closest].describe()}): equal on {hits} of {len(per[closest])} inputs, "
                f"up to {max_ulp[closest]} ulp away")
        partial = [(dn, names[0]) for dn, names in by_dtype.items() if names]
        if partial:
            desc += "; bit for bit " + ", ".join(f"{n} in {dn}" for dn, n in partial)
    else:
        desc = "no catalog convention applies to these inputs"
    return Match(equal[0] if equal else None, closest, max_ulp, desc, equal, per, by_dtype)
