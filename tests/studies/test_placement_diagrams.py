"""The placement diagrams (``docs/assets/diagrams/placements/*.svg``, written by
``reference_impl.studies.placement_diagrams``): committed files are the generator's output, each has its alt
text, and the steps each diagram draws compute what the tiny decoder's block computes."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import torch

from reference_impl.studies import placement_diagrams as PD
from reference_impl.studies.placements import VARIANTS
from reference_impl.tiny_lm import TinyLM, TinyLMConfig

FILES = PD.render_all()
SVG = "{http://www.w3.org/2000/svg}"


def test_committed_files_are_what_the_generator_writes():
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in PD.OUT_DIR.glob("*.svg")}
    assert set(on_disk) == set(FILES), "run python -m reference_impl.studies.placement_diagrams"
    edited = sorted(n for n in FILES if on_disk[n] != FILES[n])
    assert not edited, f"{edited} differ from the generator's output: regenerate instead of editing"


def test_every_placement_of_the_study_has_a_diagram_in_both_palettes():
    names = {n.removesuffix(".svg").removesuffix("-dark") for n in FILES}
    assert set(VARIANTS) | {"qk-norm"} <= names
    assert all(n.replace(".svg", "-dark.svg") in FILES for n in FILES if not n.endswith("-dark.svg"))


@pytest.mark.parametrize("name", sorted(FILES))
def test_diagram_has_title_and_description(name):
    root = ET.fromstring(FILES[name])
    assert root.find(f"{SVG}title").text.strip() and len(root.find(f"{SVG}desc").text) > 40


def _by_steps(steps, block, half, h):
    """What a sub-layer drawn as ``steps`` computes with the block's own modules."""
    sub = (block.attn, block.mlp)[half]
    norms = [getattr(block, n) for n in (("norm1", "norm1_out"), ("norm2", "norm2_out"))[half] if hasattr(block, n)]
    x, v = h, h
    for st in steps:
        if st == "F":
            v = sub(v)
        elif st == "+":
            v = x + v
        elif st == "a+":
            v = block.alpha * x + v
        else:
            v = norms.pop(0)(v)
    assert not norms, "the diagram leaves a norm of the block unused"
    return v


@pytest.mark.parametrize("p", PD.PLACEMENTS, ids=lambda p: p.name)
def test_drawn_steps_compute_what_the_block_computes(p):
    placement, norm, _ = VARIANTS[p.name]
    torch.manual_seed(0)
    model = TinyLM(TinyLMConfig(d=16, layers=2, heads=2, ffn=32, context=8, norm=norm, placement=placement))
    blk = model.blocks[0]
    h = torch.randn(2, 8, 16)
    with torch.no_grad():
        want = _by_steps(p.steps, blk, 1, _by_steps(p.steps, blk, 0, h))
        assert torch.allclose(blk(h), want, atol=1e-6)
