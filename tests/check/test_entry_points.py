"""The kit's two entry points: ``python -m reference_impl.check`` and the pytest plugin."""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl.check import cli

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PLUGIN = "reference_impl_pytest"


def _env(extra: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(extra)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _plugin_args() -> list[str]:
    """Load the plugin by -p unless an installed reference_impl already registers it by its entry point."""
    installed = any(e.value == PLUGIN for e in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


@pytest.mark.guards("check.cli")
def test_the_command_prints_the_table_and_exits_non_zero_on_failure(capsys):
    args = ["--model", "gemma3_text", "--dtypes", "bf16", "--no-grads", "--widths", "33,64,127"]
    sys.path.insert(0, str(HERE))
    try:
        assert cli.main(["user_norms:rounds_before_gain", "--failures"] + args) == 1
        out = capsys.readouterr().out
        assert "22 of 22 cases FAIL" in out and "err ulp (bound)" in out and "DIFFER" in out
        assert "diagnosis: the result is rounded to bfloat16 before the gain" in out
        assert cli.main(["user_norms:gemma_rms_norm"] + args) == 0
        assert "all 22 cases pass" in capsys.readouterr().out
        assert cli.main(["user_norms:no_such_norm"] + args) == 2
        assert "user_norms has no attribute 'no_such_norm'" in capsys.readouterr().err
        assert cli.main(["user_norms.rounds_before_gain"] + args) == 2
        assert "expected 'module:function'" in capsys.readouterr().err
        assert cli.main(["user_norms:eps_outside", "--diagnose"] + args) == 0
        assert "eps outside the root" in capsys.readouterr().out
    finally:
        sys.path.remove(str(HERE))


@pytest.mark.guards("check.cli")
def test_python_dash_m_runs_the_command(tmp_path):
    shutil.copy(HERE / "user_norms.py", tmp_path)
    p = subprocess.run([sys.executable, "-m", "reference_impl.check", "user_norms:rounds_before_gain", "--model",
                        "gemma3_text", "--dtypes", "bf16", "--no-grads", "--widths", "33,64,127"], cwd=tmp_path, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert "rounded to bfloat16 before the gain" in p.stdout and "FAIL" in p.stdout


@pytest.mark.guards("check.plugin")
def test_the_pytest_plugin_expands_into_one_test_per_case(tmp_path):
    shutil.copy(HERE / "user_norms.py", tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    shutil.copy(HERE / "marker_example.py", tmp_path / "test_mine.py")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(),
                        "--norm-impl", "user_norms:rounds_before_gain", "--norm-model", "gemma3_text",
                        "--norm-dtypes", "bf16", "--norm-no-grads", "--norm-widths", "33,64,127", "test_mine.py"],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    out = p.stdout
    assert p.returncode == 1, out + p.stderr
    # 22 marked cases and the fixture's test pass; the wrong variant fails its 22 cases and the diagnosis test
    assert "23 failed, 23 passed" in out, out[-2000:]
    assert "norm-check[user_norms:rounds_before_gain]::bf16-wbf16-4x33-s1" in out
    assert "22 of 22 cases fail; diagnosis: the result is rounded to bfloat16 before the gain" in out


@pytest.mark.guards("check.plugin")
def test_the_plugin_options_and_its_usage_errors(tmp_path, monkeypatch, capsys):
    """In-process (pytest.main in the test's interpreter, torch already imported): every option, and each bad
    value as pytest's usage error, exit 4, with one line naming it."""
    shutil.copy(HERE / "user_norms.py", tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--rootdir", str(tmp_path),
            *_plugin_args(), "--norm-impl", "user_norms:gemma_rms_norm"]

    def run(*args):
        code = pytest.main(base + list(args))
        out = capsys.readouterr()
        return int(code), out.out + out.err

    code, out = run("--norm-model", "gemma3_text", "--norm-dtypes", "bf16", "--norm-weight-dtypes", "x",
                    "--norm-no-grads", "--norm-no-bits", "--norm-batch-invariant", "--norm-eps", "1e-5",
                    "--norm-convention", "rms_norm.gemma", "--norm-device", "cpu", "--norm-widths", "33")
    assert code == 0 and "6 passed" in out, out[-2000:]
    for args, msg in ((("--norm-model", "gemma99"), "unknown model 'gemma99': did you mean"),
                      (("--norm-model", "qwen3", "--norm-eps", "inf"), "--norm-eps must be a finite number >= 0"),
                      (("--norm-model", "qwen3", "--norm-device", "banana"), "unknown device 'banana'"),
                      (("--norm-model", "qwen3", "--norm-dtypes", ""), "dtypes is empty"),
                      (("--norm-convention", "fused_add_layer_norm"), "'fused_add_layer_norm' is none of them"),
                      (("--norm-model", "qwen3", "--norm-widths", "0"), "--norm-widths takes positive integers"),
                      (("--norm-model", "qwen3", "--norm-class", "banana"), "qwen3 has no norm 'banana'")):
        code, out = run(*args)
        assert code == 4, (args, code, out[-1500:])
        assert msg in out and "INTERNALERROR" not in out and "Traceback" not in out, (args, out[-1500:])


@pytest.mark.guards("check.plugin")
def test_the_plugin_does_nothing_without_its_options(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\n\ndef test_plain():\n"
        "    assert 'torch' not in sys.modules, 'the plugin must not import torch when unused'\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_plugin_args(),
                        "-p", "no:hypothesispytest", "test_plain.py"],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed" in p.stdout
