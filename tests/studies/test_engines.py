"""docs/data/engines.json (``python -m reference_impl.studies.engines``): the file against its schema and
itself, its rows against the census, and the rows whose release is at hand re-run through the kit.

CI downloads nothing: the releases fetched from the registry (vLLM, SGLang, Megatron-core, Transformer
Engine, mlx-lm, llama.cpp) are only re-run where the study's cache already holds them; Liger-Kernel is a
test dependency, so its rows are re-run everywhere, in a child process started with TRITON_INTERPRET=1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from reference_impl.provenance import REPO
from reference_impl.studies.engines import loader, modelmap, validate
from reference_impl.studies.engines.sources import CACHE, RELEASES
from reference_impl.studies.schemas import check_data

FILE = REPO / "docs" / "data" / "engines.json"


@pytest.fixture(scope="module")
def data():
    """The file against its schema (its provenance hash is checked with every data file in
    tests/studies/test_data_files.py)."""
    doc = json.loads(FILE.read_text(encoding="utf-8"))
    check_data(doc, FILE.name, "docs/data/engines.json")
    return doc


def test_file_agrees_with_itself_and_the_census(data):
    assert validate.problems(data) == []


def test_a_broken_row_is_caught(data):
    """The validator is not vacuous: flipping one verdict, one batch flag or one histogram count fails it."""
    import copy

    row = next(i for i, r in enumerate(data["rows"]) if r["verdict"] == "differs")
    bad = copy.deepcopy(data)
    bad["rows"][row]["verdict"] = "identical"
    assert any("verdict" in w for _, w in validate.problems(bad))
    bad = copy.deepcopy(data)
    r = next(r for r in bad["rows"] if r.get("batch"))
    r["batch"]["batch_invariant"] = not r["batch"]["batch_invariant"]
    assert any("batch_invariant" in w for _, w in validate.problems(bad))
    bad = copy.deepcopy(data)
    h = next(h for r in bad["rows"] for h in r["histograms"] if h["histogram"])
    h["histogram"][0] += 1
    assert any("histogram" in w for _, w in validate.problems(bad))
    bad = copy.deepcopy(data)
    bad["rows"][0]["model_type"] = "no_such_model"
    assert any("census" in w for _, w in validate.problems(bad))


def test_counts_six_engines_and_their_most_served_models(data):
    ran = {r["engine"] for r in data["rows"]}
    read = {RELEASES[k["release"]].engine for k in data["read"]}
    assert len(ran | read) >= 6, sorted(ran | read)
    for engine in ("vLLM", "SGLang", "Liger-Kernel", "MLX"):
        served = {r["model_type"] for r in data["rows"] if r["engine"] == engine}
        assert {"llama", "qwen3"} <= served, (engine, sorted(served))
    for r in data["rows"]:
        assert len(r["sha256"]) == 64 and r["file"] and r["line"] >= 1


def test_every_release_is_recorded_with_what_happened(data):
    keys = {r["key"] for r in data["releases"]}
    assert keys == set(RELEASES) - {"mlx_core"}
    for r in data["releases"]:
        assert r["version"] == RELEASES[r["key"]].version
        if r["status"] == "unavailable":
            assert r["note"], r


def test_installed_release_files_have_the_recorded_hash(data):
    assert validate.installed_hash_problems(data) == []
    checked = [r for r in data["rows"] if RELEASES[r["release"]].kind == "installed"]
    assert checked, "no row of an installed release (Liger-Kernel) to check"


def test_liger_rows_rerun_through_the_kit(data):
    """Liger-Kernel (installed) under Triton's interpreter, one row per path, float16 x with a float16 gain:
    the same histogram as the file, and the kit's smallest width agrees with the file's verdict."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    code = ("import sys; from reference_impl.studies.engines.cli import main; "
            f"sys.exit(main(['--verify', '--out', {str(FILE)!r}, '--only', 'liger', '--dtype', 'fp16']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"re-ran {out['rerun']} Liger-Kernel rows: {out['rows']}; not re-run: {out['skipped']}")
    assert out["mismatches"] == [] and done.returncode == 0, out["mismatches"]
    assert out["rerun"] == len({r["path"] for r in data["rows"] if r["release"] == "liger"
                                and r["verdict"] in ("identical", "differs")})


def test_cached_releases_rerun(data):
    """Rows of registry releases, re-run only where the study's cache holds them (never downloaded here)."""
    have = [k for k, r in RELEASES.items() if r.kind != "installed" and k != "mlx_core"
            and any(p.name.lower().startswith(r.package.replace("-", "_").lower() + "-" + r.version)
                    for p in (CACHE / "dl" / r.package).glob("*"))]
    runnable = sorted({r["release"] for r in data["rows"]} & set(have) - {"mlx"})
    if not runnable:
        pytest.skip(f"no engine release in {CACHE} (CI downloads none): only the Liger-Kernel rows were re-run")
    from reference_impl.studies.engines.verify import verify

    out = verify(data, only=runnable, dtype="fp16")
    print(f"re-ran {out['rerun']} rows of {runnable}; not re-run: {out['skipped']}")
    assert out["rerun"] >= 1 and out["mismatches"] == []


# ------------------------------------------------------------------------------------------ the machinery

SAMPLE = textwrap.dedent('''
    import torch
    from somewhere import helper, Base

    @register("x")
    class Norm(Base):
        def __init__(self, d, eps=1e-6, flag=False):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))
            self.eps, self.flag = eps, flag
            self.hook = self.loader

        def loader(self):
            return helper()

        def _norm(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

        def forward_native(self, x: "Tensor") -> "Tensor":
            return (self._norm(x.float()) * self.weight).to(x.dtype)

        def forward_cuda(self, x):
            return helper(x)
''')


def test_loader_keeps_the_called_methods_and_stubs_nothing_it_needs_not():
    got = loader.load("sample.py", SAMPLE, classes=("Norm",), methods=("__init__", "forward_native"))
    Norm = got.namespace["Norm"]
    import torch

    m = Norm(8)
    x = torch.randn(3, 8)
    assert torch.equal(m.forward_native(x), (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)))
    assert not hasattr(Norm, "forward_cuda")  # not reached from the kept methods
    with pytest.raises(NotImplementedError, match="not part of the path"):
        m.hook()
    assert any("bases" in d for d in got.dropped) and any("class decorators" in d for d in got.dropped)
    assert got.lines["Norm.forward_native"] == SAMPLE.splitlines().index(
        "    def forward_native(self, x: \"Tensor\") -> \"Tensor\":") + 1


def test_loader_names_a_free_name_it_was_not_given():
    with pytest.raises(loader.MissingName, match="helper"):
        loader.load("sample.py", SAMPLE, classes=("Norm",), methods=("__init__", "forward_cuda"))
    with pytest.raises(loader.MissingName, match="no top-level 'Gone'"):
        loader.load("sample.py", SAMPLE, classes=("Gone",))
    with pytest.raises(loader.MissingName, match="release changed"):
        loader.line_of(SAMPLE, "this line is not there")


def test_model_file_parser_finds_classes_flags_and_residual_calls():
    text = textwrap.dedent('''
        class Layer:
            def __init__(self, config):
                self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
                self.q_norm = RMSNorm(64, eps=1e-6, has_weight=False)
                self.norm = GemmaRMSNorm(config.hidden_size)
            def forward(self, h, residual):
                h, residual = self.input_layernorm(h, residual)
                return self.norm(h)
    ''')
    uses = {(u.cls, tuple(u.flags.items())): u for u in modelmap.norm_uses(text, ("RMSNorm", "GemmaRMSNorm"))}
    assert set(uses) == {("RMSNorm", ()), ("RMSNorm", (("has_weight", False),)), ("GemmaRMSNorm", ())}
    assert uses[("RMSNorm", ())].residual_lines and not uses[("GemmaRMSNorm", ())].residual_lines
    assert uses[("RMSNorm", ())].attrs == ["input_layernorm"]
