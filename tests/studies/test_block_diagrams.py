"""The block diagrams of the 2025-2026 chapter (``docs/assets/diagrams/blocks/*.svg``, written by
``reference_impl.studies.block_diagrams``): the committed files are the generator's output with their alt
text; every model a picture names has the line that shows it in its installed modeling file; the two gate
orders drawn compute what the catalog's gated entries compute; and the hyper-connection module of DeepSeek-V4
does what the picture says (a gain-free RMS over all streams, a mixing matrix whose rows and columns sum to 1)."""
from __future__ import annotations

import importlib
import inspect
import xml.etree.ElementTree as ET

import pytest
import torch

from reference_impl.norms import CATALOG
from reference_impl.studies import block_diagrams as BD

FILES = BD.render_all()
SVG = "{http://www.w3.org/2000/svg}"


def _modeling(folder):
    return importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")


def test_committed_files_are_what_the_generator_writes():
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in BD.OUT_DIR.glob("*.svg")}
    assert set(on_disk) == set(FILES), "run python -m reference_impl.studies.block_diagrams"
    edited = sorted(n for n in FILES if on_disk[n] != FILES[n])
    assert not edited, f"{edited} differ from the generator's output: regenerate instead of editing"


@pytest.mark.parametrize("name", sorted(FILES))
def test_diagram_has_title_and_description(name):
    root = ET.fromstring(FILES[name])
    assert root.find(f"{SVG}title").text.strip() and len(root.find(f"{SVG}desc").text) > 40


@pytest.mark.parametrize("label", sorted(BD.SOURCES))
def test_each_named_model_has_the_line_the_picture_relies_on(label):
    for folder, line in BD.SOURCES[label]:
        source = inspect.getsource(_modeling(folder))
        assert line in source, f"{folder}: no longer has {line!r}"


def test_the_drawn_gate_orders_compute_the_catalog_entries():
    """Left column: normalize, then multiply by act(z); right column: multiply by silu(z), then normalize;
    in float64 each equals its catalog entry's float64 twin, and the two differ."""
    spec = CATALOG["gated_rms_norm.kimi_linear"]
    inputs = spec.sample((4, 33), torch.float64, seed=3)
    x, w, z = inputs["x"], inputs["weight"], inputs["gate"]

    def norm(v):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    steps = {"N": norm, "g": None}
    for title, order, _ in BD.GATED:
        v = x
        for st in order:
            v = steps[st](v) if st == "N" else v * (torch.sigmoid(z) if order[0] == "N" else torch.nn.functional.silu(z))
        if order[0] == "N":
            want = CATALOG["gated_rms_norm.kimi_linear"].grad_twin(x, w, z, 1e-6, "sigmoid")
        else:
            want = CATALOG["gated_rms_norm.mamba2"].grad_twin(x, w, z, 1e-6, 1)
        torch.testing.assert_close(v, want, rtol=1e-12, atol=1e-12, msg=title)
    assert BD.GATED[0][1] != BD.GATED[1][1]


def test_deepseek_v4_hyper_connection_is_what_the_picture_draws():
    ds = _modeling("deepseek_v4")
    cfg = ds.DeepseekV4Config(hidden_size=16, hc_mult=4)
    hc = ds.DeepseekV4HyperConnection(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in hc.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    assert isinstance(hc.input_norm, ds.DeepseekV4UnweightedRMSNorm)        # "RMS, no gain"
    streams = torch.randn(2, 3, cfg.hc_mult, 16, generator=g)
    with torch.no_grad():
        post, comb, collapsed = hc(streams)
    assert comb.shape == (2, 3, 4, 4) and collapsed.shape == (2, 3, 16) and post.shape == (2, 3, 4)
    # Sinkhorn: the last step makes the columns sum to 1 (up to hc_eps), the rows nearly so
    torch.testing.assert_close(comb.sum(-2), torch.ones(2, 3, 4), atol=1e-4, rtol=0)
    torch.testing.assert_close(comb.sum(-1), torch.ones(2, 3, 4), atol=0.05, rtol=0)
    assert (post > 0).all() and (post < 2).all()
