"""Every input a user can give the kit gets a one-line answer: bad options of the command (exit 2), functions
that exit or return tensors without values, model names in any spelling, a transformers version that is not
the census's."""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

from reference_impl.check import check_norm, cli, models

import user_norms as U

HERE = Path(__file__).resolve().parent
FAST = {"dtypes": ("bf16",), "grads": False, "widths": (8,), "scales": (1.0,)}


@pytest.mark.guards("check.cli")
@pytest.mark.parametrize("args,msg", [
    (["--dtypes", ""], "dtypes is empty"),
    (["--dtypes", "bf17"], "unknown dtype 'bf17'"),
    (["--device", "meta"], "not meta"),
    (["--device", "banana"], "unknown device 'banana'"),
    (["--convention", "fused_add_layer_norm"], "'fused_add_layer_norm' is none of them"),
    (["--convention", "gemmma"], "unknown convention 'gemmma'"),
    (["--eps", "inf"], "--eps must be a finite number >= 0"),
    (["--eps=-1e-6"], "--eps must be a finite number >= 0"),
    (["--eps", "nan"], "--eps must be a finite number >= 0"),
    (["--widths", "0,8"], "--widths takes positive integers"),
    (["--scales", "x"], "--scales takes finite positive numbers"),
    (["--model", "Gemma99"], "unknown model 'Gemma99': did you mean"),
])
def test_bad_options_exit_2_with_one_line(args, msg, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    if "--model" not in args and "--convention" not in args:
        args = ["--model", "gemma3_text"] + args
    assert cli.main(["user_norms:gemma_rms_norm"] + args) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1, err


def test_cuda_without_a_gpu_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["user_norms:gemma_rms_norm", "--model", "gemma3_text", "--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err


def test_functions_that_exit_or_return_no_values_fail_their_cases():
    def exits(x, weight, eps):
        sys.exit(3)

    rep = check_norm(exits, "gemma3_text", raise_on_failure=False, **FAST)
    assert {r.problem for r in rep.results} == {"raised SystemExit: the function called sys.exit(3)"}
    assert rep.findings[0].key == "raises"
    meta = check_norm(lambda x, w, eps: torch.empty_like(x, device="meta"), "gemma3_text", raise_on_failure=False,
                      **FAST)
    assert {r.problem for r in meta.results} == {"returned a meta tensor (no values); the norm must return a dense "
                                                 "tensor on cpu, as x is"}
    sparse = check_norm(lambda x, w, eps: U.gemma_rms_norm(x, w, eps).to_sparse(), "gemma3_text",
                        raise_on_failure=False, **FAST)
    assert all("returned a sparse_coo tensor" in r.problem for r in sparse.results)


def test_the_command_survives_a_function_that_exits(tmp_path, capsys, monkeypatch):
    (tmp_path / "exiting.py").write_text("import sys\n\n\ndef norm(x, weight, eps):\n    sys.exit(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cli.main(["exiting:norm", "--model", "qwen3", "--dtypes", "bf16", "--widths", "8"]) == 1
    assert "called sys.exit(5)" in capsys.readouterr().out


def test_names_in_any_spelling_and_suggestions_by_similarity():
    for spelling in ("gemma3_text", "Gemma3-Text", "GEMMA3 TEXT", "gemma3text"):
        assert models.resolve(spelling).name == "gemma3_text"
    with pytest.raises(ValueError, match=r"unknown model 'lama': did you mean llama"):
        models.resolve("lama")


def test_a_census_of_another_transformers_version_warns_naming_both(tmp_path, monkeypatch):
    index = json.loads(models.INDEX.read_text())
    index["transformers"] = "4.0.0"
    path = tmp_path / "census_index.json"
    path.write_text(json.dumps(index))
    monkeypatch.setattr(models.load_index, "__defaults__", (path,))
    monkeypatch.setattr(models, "_WARNED", set())
    import importlib.metadata

    installed = importlib.metadata.version("transformers")
    with pytest.warns(UserWarning, match=f"written with transformers 4.0.0, and transformers {installed}"):
        models.resolve("qwen3")
    monkeypatch.setattr(models.load_index, "__defaults__", (models.INDEX,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models.resolve("qwen3")  # the committed index is the installed version's: no warning


def test_batch_invariant_passes_a_row_wise_norm():
    rep = check_norm(U.gemma_rms_norm, "gemma3_text", dtypes=("bf16",), widths=(33,), batch_invariant=True)
    assert rep.ok
