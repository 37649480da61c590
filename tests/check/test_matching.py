"""The one "does this equal that convention" mechanism: ulp distances, probes, candidates, match."""
from __future__ import annotations

import pytest
import torch

from reference_impl.check import matching as M

HALF_AND_SINGLE = (torch.bfloat16, torch.float16, torch.float32)


def test_ulp_distance_counts_representable_values_and_handles_nan_and_zero():
    for dt in HALF_AND_SINGLE + (torch.float64,):
        one = torch.tensor([1.0], dtype=dt)
        up = torch.nextafter(one.double(), torch.tensor([2.0], dtype=torch.float64)).to(dt) if dt == torch.float64 \
            else (one.view(M._INT[dt][0]) + 1).view(dt)
        assert int(M.ulp_distance(one, up)) == 1
        assert int(M.ulp_distance(torch.tensor([0.0], dtype=dt), torch.tensor([-0.0], dtype=dt))) == 0
        nan = torch.tensor([float("nan")], dtype=dt)
        assert int(M.ulp_distance(nan, nan)) == 0
        assert int(M.ulp_distance(nan, one)) == M.HUGE
    with pytest.raises(TypeError, match="one dtype"):
        M.ulp_distance(torch.zeros(1), torch.zeros(1, dtype=torch.float16))
    with pytest.raises(ValueError, match="one shape"):
        M.ulp_distance(torch.zeros(1), torch.zeros(2))


def test_probes_cover_widths_dtypes_gains_and_tiny_rows():
    probes = M.make_probes([7, 8], [torch.bfloat16], [torch.bfloat16, torch.float32], gain="1+w", bias=False,
                           eps=1e-6, noncontiguous=True)
    assert len(probes) == 2 * 2 * 3
    assert {p.x.shape[-1] for p in probes} == {7, 8}
    assert {p.weight.dtype for p in probes} == {torch.bfloat16, torch.float32}
    assert all(not p.x.is_contiguous() for p in probes)
    tiny = [p for p in probes if p.scale == 1e-4]
    assert all(float(p.x.float().pow(2).mean()) < 1e-6 for p in tiny), "eps must dominate the tiny rows"
    again = M.make_probes([7, 8], [torch.bfloat16], [torch.bfloat16, torch.float32], gain="1+w", bias=False,
                          eps=1e-6, noncontiguous=True)
    assert all(torch.equal(a.x, b.x) and torch.equal(a.weight, b.weight) for a, b in zip(probes, again))
    with pytest.raises(ValueError, match="gain"):
        M.make_probes([7], [torch.float32], [torch.float32], gain="2w", bias=False, eps=1e-6)


@pytest.mark.parametrize("name", ["rms_norm.llama", "rms_norm.gemma (eps outside)", "rms_norm.t5", "rms_norm.eps_outside"])
def test_each_catalog_convention_is_recognised_as_itself(name):
    gain = "1+w" if "gemma" in name else "w"
    probes = M.make_probes([33, 64], HALF_AND_SINGLE, [torch.bfloat16, torch.float32], gain=gain, bias=False, eps=1e-6)
    run = M.candidates("rms")[name]
    m = M.match(run, probes, "rms", prefer=[name])
    assert m.matched == name and m.max_ulp[name] == 0
    # the other eps placement never matches: the tiny rows separate them
    other = {"rms_norm.gemma (eps outside)": "rms_norm.gemma", "rms_norm.eps_outside": "rms_norm"}.get(name)
    if other:
        assert m.max_ulp[other] > 0


def test_llama_order_and_gemma_order_are_told_apart_in_half_precision():
    probes = M.make_probes([33], (torch.bfloat16,), (torch.bfloat16,), gain="1+w", bias=False, eps=1e-6)

    def llama_order_with_offset_gain(p):
        x = p.x.float()
        h = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + p.eps)).to(p.x.dtype)
        return (h * (1.0 + p.weight.float())).to(p.x.dtype)

    m = M.match(llama_order_with_offset_gain, probes, "rms", prefer=["rms_norm.gemma"])
    assert m.matched == "rms_norm.llama"
    assert "rounds before the gain" in m.description and "Llama" in m.description
    assert m.max_ulp["rms_norm.gemma"] > 0


def test_a_function_that_equals_nothing_gets_its_closest_convention():
    probes = M.make_probes([16], (torch.float32,), (torch.float32,), gain="w", bias=False, eps=1e-6)

    def off_by_a_lot(p):
        return M.candidates("rms")["rms_norm.llama"](p) * 1.01

    m = M.match(off_by_a_lot, probes, "rms")
    assert m.matched is None and m.all_matched == []
    assert m.closest in m.max_ulp and "equals no catalog convention" in m.description


def test_candidates_of_every_kind_run():
    for kind, gain, bias, residual in (("layer", "w", True, False), ("l2", "none", False, False),
                                       ("fused_add_rms", "w", False, True)):
        probes = M.make_probes([9], (torch.float32,), (torch.float32,), gain=gain, bias=bias, eps=1e-5,
                               residual=residual)
        cands = M.candidates(kind)
        assert cands
        first = next(iter(cands))
        m = M.match(cands[first], probes, kind)
        assert first in m.all_matched
    with pytest.raises(ValueError, match="unknown kind"):
        M.candidates("batch")
