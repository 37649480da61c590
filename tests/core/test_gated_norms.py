"""The gated RMSNorms and DeepSeek-V4's unweighted RMSNorm (reference_impl/norms/gated_rms_norm.py,
rounded_rstd_rms_norm.py) against the classes of the installed transformers, bit for bit; their copyable
functions (reference_impl/standalone/gated.py, deepseek_v4.py) likewise; and the matching mechanism telling
the three gated orders and the two activations apart on the probes' gates.

The catalog's generic tests (tests/core/test_catalog.py) cover oracle, bounds, gradients and bad inputs.
"""
from __future__ import annotations

import importlib
import warnings

import pytest
import torch

import reference_impl.standalone as sa
from reference_impl.check import matching as M
from reference_impl.norms import CATALOG

warnings.filterwarnings("ignore", message=".*torchvision.*")
import transformers  # noqa: E402,F401  a pinned test dependency: a missing one must fail, not skip

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
SHAPES = ((1, 1), (3, 6), (2, 5, 33), (4, 128))
SCALES = (1e-3, 1.0, 30.0)   # 1e-3: eps decides the bits

# entry -> (class, folder, activation the class uses)
AFTER = {
    "gated_rms_norm.qwen3_next": [("Qwen3NextRMSNormGated", "qwen3_next", "silu"),
                                  ("Qwen3_5RMSNormGated", "qwen3_5", "silu"),
                                  ("OlmoHybridRMSNormGated", "olmo_hybrid", "silu"),
                                  ("Qwen4ExpTextRMSNormGated", "qwen4_exp", "silu")],
    "gated_rms_norm.kimi_linear": [("KimiLinearRMSNormGated", "kimi_linear", "sigmoid"),
                                   ("BailingHybridRMSNormGated", "bailing_hybrid", "sigmoid"),
                                   ("Glm5NextTextRMSNormGated", "glm5_next", "sigmoid"),
                                   ("LaraMiniRMSNormGated", "lara_mini", "silu"),
                                   ("FalconH1RMSNormGated", "falcon_h1", "silu")],
}
BEFORE = [("MambaRMSNormGated", "mamba2"), ("BambaRMSNormGated", "bamba"), ("Zamba2RMSNormGated", "zamba2"),
          ("NemotronHRMSNormGated", "nemotron_h"), ("GraniteMoeHybridRMSNormGated", "granitemoehybrid")]


def _cls(folder, name):
    return getattr(importlib.import_module(f"transformers.models.{folder}.modeling_{folder}"), name)


def _t(shape, dtype, scale, seed, around=0.0):
    g = torch.Generator().manual_seed(seed)
    return (around + scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


def _cases():
    for dtype in DTYPES:
        for wd in sorted({dtype, torch.float32}, key=str):
            for i, shape in enumerate(SHAPES):
                for scale in SCALES:
                    seed = 100 * i + int(7 * scale)
                    yield dtype, wd, shape, scale, _t(shape, dtype, scale, seed), \
                        _t(shape[-1:], wd, 0.5, seed + 1, 1.0), _t(shape, dtype, 3.0, seed + 2)


def _same(a, b, label):
    assert a.dtype == b.dtype, f"{label}: dtype {a.dtype}, expected {b.dtype}"
    assert torch.equal(a, b), f"{label}: {int((a != b).sum())} of {a.numel()} elements differ"


def _module(cls, w, **kw):
    m = cls(w.shape[0], **kw)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(w.clone())
    return m


def _equal_to_classes(entry, fn, classes, module_kw=lambda shape: {}, skip=lambda name, wd, shape: False) -> int:
    """Entry ``entry``'s reference and its standalone copy ``fn`` against each of ``classes`` (class name,
    folder, the fifth argument: activation or groups) over :func:`_cases`, bit for bit; ``module_kw(shape)``
    the class's extra keywords, ``skip`` the cases a class does not take. Returns how many cases ran."""
    spec, n = CATALOG[entry], 0
    for name, folder, arg in classes:
        cls = _cls(folder, name)
        for dtype, wd, shape, scale, x, w, z in _cases():
            if skip(name, wd, shape):
                continue
            m = _module(cls, w, eps=1e-6, **module_kw(shape))
            label = f"{entry} ({arg}) vs {name}, x {dtype}, w {wd}, {shape}, scale {scale:g}"
            with torch.no_grad():
                want = m(x, gate=z)
                _same(spec.reference(x, w, z, 1e-6, arg), want, label)
                _same(fn(x, w, z, 1e-6, arg), want, label + " (standalone)")
            n += 1
    return n


@pytest.mark.guards("norm.gated_rms_norm.qwen3_next", "norm.gated_rms_norm.kimi_linear",
                    "snippet:standalone.qwen3_next_gated_rms_norm", "snippet:standalone.kimi_linear_gated_rms_norm")
@pytest.mark.parametrize("entry", sorted(AFTER))
def test_gate_after_entries_equal_the_transformers_classes(entry):
    # Falcon-H1 multiplies by the weight uncast: a float64 weight makes it a float64 product
    n = _equal_to_classes(entry, getattr(sa, sa.BY_CATALOG[entry]), AFTER[entry],
                          skip=lambda name, wd, shape: name == "FalconH1RMSNormGated" and wd == torch.float64)
    # 7 (x, weight) dtype pairs per shape and scale; Falcon-H1 without its 12 float64-weight cases
    assert n == len(AFTER[entry]) * 7 * len(SHAPES) * len(SCALES) - 12 * sum(c[0].startswith("Falcon")
                                                                              for c in AFTER[entry])


@pytest.mark.guards("norm.gated_rms_norm.mamba2", "snippet:standalone.mamba2_gated_rms_norm")
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_gate_before_entry_equals_the_mamba_classes_per_group(groups):
    n = _equal_to_classes("gated_rms_norm.mamba2", sa.mamba2_gated_rms_norm,
                          [(name, folder, groups) for name, folder in BEFORE],
                          module_kw=lambda shape: {"group_size": shape[-1] // groups},
                          skip=lambda name, wd, shape: shape[-1] % groups != 0)
    assert n >= len(BEFORE) * 6 * 2 * len(SCALES)


@pytest.mark.guards("norm.rms_norm.deepseek_v4", "snippet:standalone.deepseek_v4_rms_norm")
def test_unweighted_rounded_rstd_equals_deepseek_v4_and_glm5_next():
    spec = CATALOG["rms_norm.deepseek_v4"]
    for name, folder in (("DeepseekV4UnweightedRMSNorm", "deepseek_v4"), ("Glm5NextTextUnweightedRMSNorm", "glm5_next")):
        m = _cls(folder, name)(eps=1e-6)
        for dtype, wd, shape, scale, x, _w, _z in _cases():
            with torch.no_grad():
                want = m(x)
                _same(spec.reference(x, 1e-6), want, f"{name} {dtype} {shape} scale {scale:g}")
                _same(sa.deepseek_v4_rms_norm(x, 1e-6), want, f"{name} {dtype} {shape} (standalone)")
    # one rounding more than Llama's order: it differs from rms_norm.llama without a gain somewhere
    x = _t((64, 96), torch.bfloat16, 1.0, 5)
    assert not torch.equal(spec.reference(x, 1e-6), CATALOG["rms_norm.llama"].reference(
        x, None, 1e-6, "llama", "inside"))


@pytest.mark.guards("census.file")
def test_probe_gates_tell_the_orders_and_activations_apart():
    """On the probes with a gate, each gated class matches exactly one entry and activation, and the other
    candidates are at least one ulp away somewhere: the probes can fail."""
    probes = M.make_probes([7, 64], [torch.bfloat16, torch.float16, torch.float32],
                           [torch.float32, torch.bfloat16], gain="w", bias=False, eps=1e-6, gate=True)
    assert all(p.gate is not None and p.gate.dtype == p.x.dtype for p in probes)
    want = {"Qwen3NextRMSNormGated": "gated_rms_norm.qwen3_next (silu)",
            "KimiLinearRMSNormGated": "gated_rms_norm.kimi_linear (sigmoid)",
            "LaraMiniRMSNormGated": "gated_rms_norm.kimi_linear (silu)",
            "MambaRMSNormGated": "gated_rms_norm.mamba2"}
    folders = {"Qwen3NextRMSNormGated": "qwen3_next", "KimiLinearRMSNormGated": "kimi_linear",
               "LaraMiniRMSNormGated": "lara_mini", "MambaRMSNormGated": "mamba2"}
    for name, expected in want.items():
        cls = _cls(folders[name], name)
        mods = {d: (cls(d, group_size=d) if name.startswith("Mamba") else cls(d)) for d in (7, 64)}

        def run(p, mods=mods):
            m = mods[p.x.shape[-1]]
            m.weight.data = p.weight.clone()
            return m(p.x, gate=p.gate)

        got = M.match(run, probes, "gated_rms")
        assert got.all_matched == [expected], f"{name}: {got.all_matched}"
        assert all(v > 0 for k, v in got.max_ulp.items() if k != expected), got.max_ulp
    # without a gate, the gated candidates do not apply
    plain = M.make_probes([7], [torch.float32], [torch.float32], gain="w", bias=False, eps=1e-6)
    for c in M.candidate_list("gated_rms"):
        with pytest.raises(M.NotApplicable):
            M._runner(c, "gated_rms")(plain[0])


def test_a_declared_entry_becomes_a_candidate_without_an_edit_to_matching(monkeypatch):
    import dataclasses

    import reference_impl.norms as norms

    real = dict(norms._catalog())
    spec = dataclasses.replace(real["rms_norm.deepseek_v4"], name="test_only.halved", match_kind="test_kind",
                               match_run=lambda p, k: p.x * k, match_variants=(("half", {"k": 0.5}),),
                               match_description="halves x")
    monkeypatch.setattr(norms, "_catalog", lambda: {**real, spec.name: spec})
    assert "test_kind" in M.kinds()
    cands = M.candidate_list("test_kind")
    assert [c.name for c in cands] == ["test_only.halved (half)"]
    assert cands[0].describe() == "halves x; k 0.5"
    probe = M.make_probes([5], [torch.float32], [torch.float32], gain="w", bias=False, eps=1e-6)[0]
    assert torch.equal(M.candidates("test_kind")["test_only.halved (half)"](probe), probe.x * 0.5)
    # the existing names and their order are unchanged by the new field
    rms = [c.name for c in M.candidate_list("rms")]
    assert rms[:4] == ["rms_norm.llama", "rms_norm.llama (1 + w folded)", "rms_norm.llama (eps outside)",
                       "rms_norm.llama (eps outside) (1 + w folded)"]
    assert rms.index("rms_norm.deepseek_v4") > rms.index("rms_norm.eps_outside")


@pytest.mark.guards("norm.rms_norm.imagegpt", "norm.layer_norm.x_dtype", "norm.layer_norm.deberta",
                    "snippet:standalone.imagegpt_rms_norm", "snippet:standalone.x_dtype_layer_norm",
                    "snippet:standalone.deberta_layer_norm")
def test_low_precision_entries_equal_imagegpt_pocket_tts_gradium_and_deberta():
    rows = [("rms_norm.imagegpt", "ImageGPTLayerNorm", "imagegpt", {"eps": 1e-5}, False),
            ("layer_norm.x_dtype", "PocketTTSFlowLayerNorm", "pocket_tts", {"eps": 1e-5}, True),
            ("layer_norm.x_dtype", "GradiumPhononTTSFlowLayerNorm", "gradium_phonon_tts", {"eps": 1e-5}, True),
            ("layer_norm.deberta", "DebertaLayerNorm", "deberta", {"eps": 1e-12}, True)]
    for entry, name, folder, kw, has_bias in rows:
        spec, fn = CATALOG[entry], getattr(sa, sa.BY_CATALOG[entry])
        cls = _cls(folder, name)
        n = 0
        for dtype, wd, shape, scale, x, w, z in _cases():
            if has_bias and name != "DebertaLayerNorm" and wd != dtype:
                continue  # nn.LayerNorm subclasses keep gain and bias in their own dtype
            m = _module(cls, w, **kw)
            args = (x, w)
            if has_bias:
                b = _t(shape[-1:], wd, 0.3, 9)
                with torch.no_grad():
                    m.bias = torch.nn.Parameter(b.clone())
                args = (x, w, b)
            label = f"{entry} vs {name}, x {dtype}, w {wd}, {shape}, scale {scale:g}"
            with torch.no_grad():
                want = m(x)
                _same(spec.reference(*args, kw["eps"]), want, label)
                _same(fn(*args, kw["eps"]), want, label + " (standalone)")
            n += 1
        assert n >= len(DTYPES) * len(SHAPES) * len(SCALES), f"{name}: only {n} cases"


@pytest.mark.guards("norm.gated_rms_norm.falcon_h1", "snippet:standalone.falcon_h1_gated_rms_norm")
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_gate_before_float32_entry_equals_falcon_h1_with_the_gate_before_the_norm(groups):
    """The fourth order: ``FalconH1RMSNormGated(norm_before_gate=False)`` (what ``FalconH1Mixer`` builds when
    the config says ``mamba_norm_before_gate=False``), bit for bit, and not the Mamba-2 order."""
    folder = "falcon_h1"
    cls = _cls(folder, "FalconH1RMSNormGated")
    import inspect
    assert "norm_before_gate=config.mamba_norm_before_gate" in inspect.getsource(
        importlib.import_module(f"transformers.models.{folder}.modeling_{folder}").FalconH1Mixer).replace(" ", "")
    n = _equal_to_classes("gated_rms_norm.falcon_h1", sa.falcon_h1_gated_rms_norm, [("FalconH1RMSNormGated", folder, groups)],
                          module_kw=lambda shape: {"n_groups": groups, "norm_before_gate": False},
                          skip=lambda name, wd, shape: shape[-1] % groups != 0)
    assert n >= 7 * 2 * len(SCALES)
    x, w, z = _t((64, 96), torch.bfloat16, 1.0, 5), _t((96,), torch.float32, 0.5, 6, 1.0), _t((64, 96), torch.bfloat16, 3.0, 7)
    mamba = CATALOG["gated_rms_norm.mamba2"].reference(x, w, z, 1e-6, groups).to(torch.bfloat16)
    assert not torch.equal(CATALOG["gated_rms_norm.falcon_h1"].reference(x, w, z, 1e-6, groups), mamba)
    with torch.no_grad():
        m = _module(cls, w, eps=1e-6, n_groups=groups, norm_before_gate=False)
        assert not torch.equal(m(x, gate=z), mamba)


GATED = ("gated_rms_norm.qwen3_next", "gated_rms_norm.kimi_linear", "gated_rms_norm.mamba2", "gated_rms_norm.falcon_h1")


@pytest.mark.parametrize("entry", GATED)
@pytest.mark.parametrize("eps", [1e39, float("inf"), -1e-6, float("nan")])
def test_gated_norms_refuse_an_eps_float32_cannot_add(entry, eps):
    """eps goes into a float32 mean square: one above float32's largest value (1e39) would give zeros, so it
    is refused as the other norms refuse it, with the word eps in the message."""
    spec = CATALOG[entry]
    inputs = spec.sample((3, 6), torch.float32)
    with pytest.raises(ValueError, match="eps"):
        spec.run_reference(inputs, eps=eps)
    assert torch.isfinite(spec.run_reference(inputs, eps=3e38)).all()  # the largest float32 still runs


@pytest.mark.parametrize("fn", ["qwen3_next_gated_rms_norm", "kimi_linear_gated_rms_norm"])
@pytest.mark.parametrize("activation", ["SiLU", "gelu", "Sigmoid", ""])
def test_unknown_activations_are_refused_with_the_known_ones(fn, activation):
    x, w, z = _t((3, 6), torch.float32, 1.0, 1), _t((6,), torch.float32, 0.5, 2, 1.0), _t((3, 6), torch.float32, 3.0, 3)
    for f in (getattr(sa, fn), CATALOG[{v: k for k, v in sa.BY_CATALOG.items()}[fn]].reference):
        with pytest.raises(ValueError, match="known ones are silu, sigmoid"):
            f(x, w, z, 1e-6, activation)


def _subnormal_edge_case():
    """A float16 row whose gated input is tiny next to its RMS in all features but one: the normalized
    values (about 7e-6) lie below float16's normal range (6.1e-5), where rounding to float16 has an absolute
    error up to 2^-25 that no relative term covers, and a large float32 gain carries it to the output."""
    d = 8
    x = torch.full((1, d), 1e-5, dtype=torch.float16)
    x[0, 0] = 4.0
    gate = torch.full((1, d), 4.0, dtype=torch.float16)
    w = torch.full((d,), 1000.0, dtype=torch.float32)
    w[1:] = torch.linspace(900.0, 1100.0, d - 1)
    return {"x": x, "weight": w, "gate": gate}


@pytest.mark.guards("norm.gated_rms_norm.mamba2")
def test_mamba2_bound_holds_at_the_float16_subnormal_edge_and_needs_the_floor():
    spec = CATALOG["gated_rms_norm.mamba2"]
    inputs = _subnormal_edge_case()
    params = spec.params
    args = {k: v.double().numpy() for k, v in inputs.items()}
    want = spec.oracle(**args, **params)
    err = abs(spec.run_reference(inputs).double().numpy() - want)
    bound = spec.bound(inputs, params)
    assert (err <= bound).all(), (err, bound)
    # what the rounding to float16's subnormals adds: half of float16's smallest subnormal times the gain
    eta = float(torch.finfo(torch.float16).tiny) * 2.0 ** -11
    assert eta == 2.0 ** -25
    floor = eta * args["weight"]
    relative = bound - floor * (1 + 16 * 2.0 ** -24) - 4 * float(torch.finfo(torch.float32).tiny) * 2.0 ** -24 * (args["weight"] + 1) * (1 + 16 * 2.0 ** -24)
    assert (err > relative).any(), "the case does not reach the floor: it tests nothing"
    # the transformers class gives the same bits, so a correct implementation is inside the bound
    cls = _cls("mamba2", "MambaRMSNormGated")
    m = _module(cls, inputs["weight"], eps=1e-6, group_size=8)
    with torch.no_grad():
        assert torch.equal(m(inputs["x"], gate=inputs["gate"]), spec.run_reference(inputs))
