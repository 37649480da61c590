"""The adoption table's checkpoint list (reference_impl/checkpoints.yaml) is well formed, names every family of
reference_impl/families.py, and its LayerNorm families really build torch.nn.LayerNorm in the installed
transformers, with the eps of the config attribute the list names."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch
import yaml

from reference_impl.families import FAMILIES

REPO = Path(__file__).resolve().parents[2]
LIST = yaml.safe_load((REPO / "reference_impl" / "checkpoints.yaml").read_text())
pytestmark = pytest.mark.guards("adoption.checkpoints")
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TINY = dict(hidden_size=64, n_embd=64, d_model=64, num_attention_heads=4, n_head=4, num_hidden_layers=1, n_layer=1,
            num_key_value_heads=4, intermediate_size=128, ffn_dim=128, vocab_size=128, max_position_embeddings=64,
            n_positions=64, word_embed_proj_dim=64)


def _all_checkpoints():
    for group in ("rmsnorm_families", "layernorm_families"):
        for fam in LIST[group]:
            for c in fam["checkpoints"]:
                yield fam["family"], c


def test_every_row_is_complete_and_cited():
    rows = list(_all_checkpoints())
    assert len(rows) >= 20
    for family, c in rows:
        assert REPO_ID.match(c["repo"]), (family, c)
        assert isinstance(c["eps"], float) and 0 < c["eps"] < 1e-3, (family, c)
        assert c["release"].strip(), (family, c)
        assert c["key"] is None or re.fullmatch(r"[a-z_]+(\.[a-z_]+)?", c["key"]), (family, c)
        if c["key"] is None:
            assert c.get("note"), f"{family}: a checkpoint without an eps key must say why"
    assert len({c["repo"] for _, c in rows}) == len(rows), "a repository listed twice"


def test_every_family_of_the_family_table_has_a_released_checkpoint():
    listed = [f["family"] for f in LIST["rmsnorm_families"]]
    assert listed == [f[0] for f in FAMILIES], "same families, same order as reference_impl/families.py"


def _tiny_config(cls):
    cfg = cls()
    for k, v in TINY.items():
        if hasattr(cfg, k):
            setattr(cfg, k, v)
    return cfg


@pytest.mark.parametrize("fam", LIST["layernorm_families"], ids=lambda f: f["family"])
def test_layernorm_family_builds_torch_layernorm_with_the_config_eps(fam):
    config_mod = importlib.import_module(f"transformers.models.{fam['folder']}.configuration_{fam['folder']}")
    model_mod = importlib.import_module(f"transformers.models.{fam['folder']}.modeling_{fam['folder']}")
    cfg = _tiny_config(getattr(config_mod, fam["config_class"]))
    marker = 3.25e-5  # a value no default has: the norms must take their eps from this attribute
    if fam["eps_attribute"]:
        setattr(cfg, fam["eps_attribute"], marker)
    model_cls = next(getattr(model_mod, n) for n in dir(model_mod)
                     if n.endswith("Model") and not n.endswith("PreTrainedModel") and isinstance(getattr(model_mod, n), type))
    torch.manual_seed(0)
    model = model_cls(cfg)
    norms = [m for m in model.modules() if "norm" in type(m).__name__.lower()]
    assert norms, f"{fam['family']}: no norm module found"
    assert all(type(m) is torch.nn.LayerNorm for m in norms), {type(m).__name__ for m in norms}
    want = marker if fam["eps_attribute"] else 1e-5  # OPT: nn.LayerNorm's own default
    assert {m.eps for m in norms} == {want}
