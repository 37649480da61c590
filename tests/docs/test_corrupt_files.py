"""Corrupt data and ledger files fail the build with an error that names the file and the field.

The data files (docs/data/*.json) and the claims ledger (ledger/*.yaml) go through one validator, the JSON
Schema machinery of reference_impl/studies/schemas: bad UTF-8, too deep a nesting, NaN or Infinity, a key
given twice, a scalar where a list belongs, an entry without its id. A link to a heading that does not
exist fails the strict build (``validation: anchors: warn`` in mkdocs.yml).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from reference_impl.studies import schemas  # noqa: E402
from site_hooks import ledger  # noqa: E402
from site_hooks.macros import MacroError  # noqa: E402

DATA = REPO / "docs" / "data"
GOOD = (DATA / "worked_example.json").read_text()


def _write(tmp_path, name, content) -> Path:
    p = tmp_path / name
    (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
    return p


@pytest.mark.guards("data:schemas")
@pytest.mark.parametrize("case,content,message", [
    ("bad_utf8", GOOD.encode()[:40] + b"\xff\xfe" + GOOD.encode()[40:], r"worked_example\.json is not valid UTF-8: byte 40"),
    ("deep_nesting", "[" * 100_000 + "]" * 100_000, r"worked_example\.json is nested too deeply"),
    ("nan", GOOD.replace('"d": 4', '"d": NaN', 1), r"worked_example\.json: at d: NaN is not a number JSON allows"),
    ("infinity", GOOD.replace('"d": 4', '"d": -Infinity', 1), r"worked_example\.json: at d: -Infinity"),
    ("duplicate_key", GOOD.replace('"d": 4', '"d": 4, "d": 5', 1), r"worked_example\.json: at \(top level\): key 'd' appears more"),
])
def test_a_corrupt_data_file_names_the_file_and_the_field(tmp_path, case, content, message):
    assert '"d": 4' in GOOD, "the fixture expects worked_example.json to hold d = 4"
    with pytest.raises(schemas.DataFileError, match=message):
        schemas.check_file(_write(tmp_path, "worked_example.json", content))


def test_nan_deep_inside_names_its_path(tmp_path):
    data = json.loads((DATA / "numerics.json").read_text())
    data["casting"]["bfloat16"]["fraction_different"] = "__NAN__"
    text = json.dumps(data).replace('"__NAN__"', "NaN")
    with pytest.raises(schemas.DataFileError, match=r"at casting\.bfloat16\.fraction_different: NaN"):
        schemas.check_file(_write(tmp_path, "numerics.json", text))


# --- files that parse and type well but cannot be true -------------------------------------------------
# Each case corrupts a copy of one committed file the way a hand edit or a broken run would; the build's
# check (site_hooks/data.py -> schemas.check_file -> schemas/invariants.py) must refuse it, naming the
# file and the field.

def _first(results, **key):
    return next(i for i, r in enumerate(results) if all(r.get(k) == v for k, v in key.items()) and "gbps" in r)


def _faster(data, factor):  # a record timed `factor` times faster, consistently (gbps = bytes / time)
    i = _first(data["results"], impl="fused_rms_norm", mode="forward_out")
    r = data["results"][i]
    for k in ("median_s", "min_s", "max_s", "q1_s", "q3_s"):
        r[k] /= factor
    r["round_median_s"] = [t / factor for t in r["round_median_s"]]
    for k in ("gbps", "gbps_min", "gbps_max"):
        r[k] *= factor
    return i


def _set(dotted, value):
    def apply(data):
        node = data
        *head, last = dotted.split(".")
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        key = int(last) if isinstance(node, list) else last
        node[key] = value(node[key]) if callable(value) else value
    return apply


def _faster_copy(data, factor):  # the copy of one shape timed `factor` times faster, consistently
    i = _first(data["results"], impl="copy", mode="forward_out")
    r = data["results"][i]
    for k in ("median_s", "min_s", "max_s", "q1_s", "q3_s"):
        r[k] /= factor
    r["round_median_s"] = [t / factor for t in r["round_median_s"]]
    for k in ("gbps", "gbps_min", "gbps_max"):
        r[k] *= factor


def _bench_field(key, value):
    def apply(data):
        i = _first(data["results"], impl="fused_rms_norm", mode="forward_out")
        r = data["results"][i]
        r[key] = value(r) if callable(value) else value
        return i
    return apply


IMPLAUSIBLE = [  # (case, file, edit of the parsed data or of the text, expected message after the file name)
    ("date_2099", "worked_example.json", _set("provenance.date", "2099-01-01T00:00:00+00:00"),
     r"at provenance\.date: 2099-01-01T00:00:00\+00:00 lies in the future"),
    ("bandwidth_17000x_copy", "bench_cpu.json", lambda d: _faster(d, 17000.0),
     r"at results\.\d+\.gbps: .* times the copy of the same bytes"),
    ("gbps_not_bytes_over_time", "bench_cpu.json", _bench_field("gbps", lambda r: r["gbps"] * 1.25),
     r"at results\.\d+\.gbps: .* but bytes / median_s is"),
    ("min_above_max", "bench_cpu.json", _bench_field("min_s", lambda r: 2 * r["max_s"]),
     r"at results\.\d+\.min_s: min, quartiles and max are out of order"),
    ("copy_made_faster_by_hand", "bench_cpu.json", lambda d: _faster_copy(d, 2.0),
     r"at results\.\d+\.ratio_copy: .* the timings give"),
    ("label_edited", "bench_cpu.json", _set("comparisons.0.label", lambda v: "faster" if v != "faster" else "slower"),
     r"at comparisons\.0\.label: .* the timings give"),
    ("1e400", "worked_example.json", ("text", '"eps": 1e-06', '"eps": 1e400'),
     r"at eps\.eps: 1e400 is beyond the float range"),
    ("rms_6", "worked_example.json", _set("rms.rms", {"exact": "6", "value": 6.0}),
     r"at rms\.rms\.exact: 6 but x = \[-1, 5, 5, 7\] gives 5"),
    ("rms_value_6", "worked_example.json", _set("rms.rms.value", 6.0),
     r"at rms\.rms\.value: 6\.0 but x = \[-1, 5, 5, 7\] gives 5\.0"),
    ("command_of_another_study", "worked_example.json", _set("provenance.command", "python -m reference_impl.studies.numerics"),
     r"at provenance\.command: .*reference_impl\.studies\.numerics' names a study that does not write worked_example\.json"),
    ("missing_source", "worked_example.json", _set("provenance.sources.0", "reference_impl/studies/no_such_study.py"),
     r"at provenance\.sources\.0: 'reference_impl/studies/no_such_study\.py' does not exist"),
    ("stale_hash", "worked_example.json", _set("provenance.source_hash", "0123456789abcdef"),
     r"at provenance\.source_hash: recorded 0123456789abcdef but the sources now hash to [0-9a-f]{16}"),
    ("rsqrt_exact_above_inputs", "rsqrt_cpu.json", _set("methods.libm_div_sqrt.normal.exact", lambda v: 2122317824 + 1),
     r"at methods\.libm_div_sqrt\.normal\.exact: 2122317825 exact results out of 2122317824 inputs"),
    ("1e12_bytes_per_token", "distributed.json", _set("per_token_bf16_d4096.p8.rms_sharded_bytes", 1e12),
     r"at per_token_bf16_d4096\.p8\.rms_sharded_bytes: 1000000000000\.0 bytes but the formula"),
    ("mean_not_of_its_values", "placements.json", _set("placements.pre.final.mean", lambda v: v - 0.5),
     r"at placements\.pre\.final\.mean: .* but the values give"),
    ("final_loss_not_the_last", "training.json", _set("main.pre-ln.runs.1.final_val_loss", lambda v: v - 0.1),
     r"at main\.pre-ln\.runs\.1\.final_val_loss: .* but the run's last recorded validation loss is"),
    ("negative_validation_loss", "training.json", _set("main.pre-rms.runs.0.final_val_loss", -0.25),
     r"at main\.pre-rms\.runs\.0\.final_val_loss: a loss of -0\.25"),
]


@pytest.mark.guards("data:schemas")
@pytest.mark.parametrize("case,name,edit,message", IMPLAUSIBLE, ids=[c[0] for c in IMPLAUSIBLE])
def test_the_build_refuses_an_implausible_data_file_naming_file_and_field(tmp_path, monkeypatch, case, name, edit,
                                                                          message):
    """The site build's own path: site_hooks.data.validated() over a data folder holding the corrupted copy."""
    from site_hooks import data as site_data

    text = (DATA / name).read_text()
    if isinstance(edit, tuple):
        assert edit[1] in text, f"the fixture expects {name} to hold {edit[1]}"
        text = text.replace(edit[1], edit[2], 1)
    else:
        data = json.loads(text)
        edit(data)
        text = json.dumps(data, indent=1)
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder, name, text)
    monkeypatch.setattr(site_data, "DATA", folder)
    site_data.clear_caches()
    try:
        with pytest.raises(MacroError, match=re.escape(name) + r"(?s:.*)(\n  |: )" + message):
            site_data.validated()
    finally:
        site_data.clear_caches()


CLAIMS = (REPO / "ledger" / "claims.yaml").read_text()


@pytest.mark.guards("data:schemas")
@pytest.mark.parametrize("case,content,message", [
    ("bad_yaml", "claims: [\n  - id: C01\n", r"ledger/claims\.yaml is not valid YAML"),
    ("bad_utf8", CLAIMS.encode()[:100] + b"\xc3\x28" + CLAIMS.encode()[100:], r"ledger/claims\.yaml is not valid UTF-8"),
    ("scalar", "just a sentence\n", r"ledger/claims\.yaml does not match .*ledger_claims\.schema\.json:\n  at \(top level\)"),
    ("string_entry", CLAIMS.replace("  - id: C02\n", "  - a claim written as a string\n  - id: C02\n", 1),
     r"ledger/claims\.yaml does not match.*\n  at claims\.1: 'a claim written as a string' is not of type 'object'"),
    ("missing_id", CLAIMS.replace("  - id: C02\n    source:", "  - source:", 1),
     r"(?s)ledger/claims\.yaml does not match.*at claims\.1: 'id' is a required property"),
    ("duplicate_key", CLAIMS.replace("    gpu: false\n", "    gpu: false\n    gpu: true\n", 1),
     r"ledger/claims\.yaml is not valid YAML.*key 'gpu' appears more than once"),
])
def test_a_corrupt_claims_file_names_the_file_and_the_field(tmp_path, monkeypatch, case, content, message):
    assert "  - id: C02\n    source:" in CLAIMS
    ledger_dir = tmp_path / "ledger"
    ledger_dir.mkdir()
    path = _write(ledger_dir, "claims.yaml", content)
    monkeypatch.setattr(ledger, "CANONICAL", path)
    monkeypatch.setattr(schemas, "REPO", tmp_path)  # names the file relative to the copied tree
    ledger.clear_caches()
    try:
        with pytest.raises(MacroError, match=message):
            ledger.canonical()
    finally:
        ledger.clear_caches()


@pytest.mark.guards("data:schemas")
@pytest.mark.parametrize("case,content,message", [
    ("scalar", "42\n", r"ledger/cpu\.yaml does not match.*\n  at \(top level\): 42 is not of type 'array'"),
    ("string_entry", "- C07 is verified\n", r"at 0: 'C07 is verified' is not of type 'object'"),
    ("missing_id", "- verdict: verified\n  claim: a claim of ten characters\n  finding: a finding of ten\n"
                   "  evidence: [{cite: 'a citation long enough'}]\n", r"at 0: 'id' is a required property"),
    ("bad_utf8", b"- id: C07\n  claim: \xff\n", r"ledger/cpu\.yaml is not valid UTF-8: byte 19 \(line 2\)"),
    ("bad_yaml", "- id: [C07\n", r"ledger/cpu\.yaml is not valid YAML"),
])
def test_a_corrupt_ledger_file_is_a_problem_naming_the_file_and_the_field(tmp_path, monkeypatch, case, content, message):
    ledger_dir = tmp_path / "ledger"
    ledger_dir.mkdir()
    shutil.copy(REPO / "ledger" / "claims.yaml", ledger_dir / "claims.yaml")
    _write(ledger_dir, "cpu.yaml", content)
    monkeypatch.setattr(ledger, "LEDGER", ledger_dir)
    monkeypatch.setattr(ledger, "CANONICAL", ledger_dir / "claims.yaml")
    monkeypatch.setattr(schemas, "REPO", tmp_path)
    ledger.clear_caches()
    try:
        _, problems = ledger.entries()
    finally:
        ledger.clear_caches()
    assert any(__import__("re").search(message, p, __import__("re").S) for p in problems), problems


def test_the_real_ledger_and_data_files_pass_the_validator():
    assert len(ledger.canonical()) >= 1
    assert ledger.entries()[1] == []
    for p in schemas.data_files(DATA):
        schemas.check_file(p)


# --- anchors --------------------------------------------------------------------------------------------

def test_the_strict_build_fails_on_a_link_to_a_missing_heading(tmp_path):
    """mkdocs reports a missing anchor at INFO level unless validation.anchors is "warn"; the site's config
    sets it, and a strict build with that setting fails on such a link (the mechanism, on a tiny site)."""
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Lenient)
    assert config["strict"] is True and config["validation"]["anchors"] == "warn"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the value](other.md#a-heading-named-after-a-value).\n")
    (docs / "other.md").write_text("# Other\n\n## A heading that changed\n")
    def build():  # as the site tests run it (no -q: quiet mode would hide the warning from strict mode)
        return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)

    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\n")
    assert build().returncode == 0  # mkdocs' default: the broken link passes (an INFO line only)
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\nvalidation:\n  anchors: warn\n")
    done = build()
    assert done.returncode != 0 and "a-heading-named-after-a-value" in done.stderr + done.stdout, done.stderr


class _Lenient(yaml.SafeLoader):
    """mkdocs.yml may hold !!python/name and !ENV tags: read them as plain values."""


_Lenient.add_multi_constructor("", lambda loader, suffix, node: None)


def test_an_archived_bench_run_gets_the_same_checks_except_the_source_hash(tmp_path):
    """A machine's archived run keeps the hash of the kernels it measured (the page shows it as measured
    with earlier kernels), but an impossible figure in it is refused like one in bench_cpu.json."""
    from reference_impl.studies.bench import archive

    path = sorted((DATA / "bench_cpu_machines").glob("*.json"))[0]
    data = json.loads(path.read_text())
    data["provenance"]["source_hash"] = "0123456789abcdef"  # measured with other kernels: allowed
    assert archive.check_archived(_write(tmp_path, path.name, json.dumps(data)))["provenance"]["quick"] is False
    i = _faster(data, 17000.0)
    with pytest.raises(schemas.DataFileError, match=rf"{re.escape(path.name)}(?s:.*)\n  at results\.{i}\.gbps: .* times the copy"):
        archive.check_archived(_write(tmp_path, path.name, json.dumps(data)))
