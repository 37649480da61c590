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
    ("group_round_dropped", "bench_cpu.json",
     lambda d: d["results"][_first(d["results"], mode="short_rows")]["round_median_s"].pop(),
     r"at results\.\d+\.round_median_s: \d+ rounds, settings\.group_repeats \d+"),
    ("group_repeats_below_repeats", "bench_cpu.json", _set("settings.group_repeats", 1),
     r"at settings\.group_repeats: 1: the groups run at least settings\.repeats"),
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

    folder = _corrupted(tmp_path, name, edit).parent
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


# --- files that disagree with themselves, with each other or with the installed sources -----------------
# Each case corrupts a copy of one committed file the way a merge of two runs, a hand edit or a stale
# rewrite would; both check_file and the build's validator must refuse it, naming the file and the field
# (reference_impl/studies/schemas/consistency.py).

def _append_copy(listed, i=0, **changes):
    def apply(data):
        data[listed].append({**data[listed][i], **changes})
    return apply


def _first_where(listed, test, key, value):
    def apply(data):
        row = next(r for r in data[listed] if test(r))
        row[key] = value(row[key]) if callable(value) else value
    return apply


def _index_row(model_type, key, value):
    def apply(data):
        data["models"][model_type][key] = value
    return apply


HUGE = "1" + "0" * 4999  # Python's int() refuses more than 4300 digits with a bare ValueError

DISAGREEING = [  # (case, file, edit, expected message after the file name)
    ("census_model_type_twice", "census.json", _append_copy("models", placement="post"),
     r"at models\.0: '[\w-]+' is listed 2 times"),
    ("census_class_twice", "census.json", _append_copy("classes", eps_default=0.5),
     r"at classes\.0: '\w+' is listed 2 times"),
    ("census_unknown_entry", "census.json", _set("classes.0.catalog", "rms_norm.banana"),
     r"at classes\.0\.catalog: 'rms_norm\.banana' is not a catalog entry or variant"),
    ("census_count_of_matched", "census.json", _set("counts.matched", lambda v: v + 1),
     r"at counts\.matched: (\d+) but the rows give (?!\1)\d+"),
    ("census_count_by_catalog", "census.json", lambda d: d["counts"]["by_catalog"].update({"rms_norm.llama": 1}),
     r"at counts\.by_catalog: 'rms_norm\.llama': 1 but the rows give \d+"),
    ("census_source_missing", "census.json", _set("classes.0.source", "models/llama/modeling_nothing.py"),
     r"at classes\.0\.source: models/llama/modeling_nothing\.py is not a file of the installed package"),
    ("census_line_wrong", "census.json", _set("classes.0.line", lambda v: v + 3),
     r"at classes\.0\.source: line \d+ of the installed models/.* does not define class \w+"),
    ("census_matched_far_away", "census.json", _first_where("classes", lambda c: c["catalog"], "max_ulp", 20504777),
     r"at classes\.\d+\.max_ulp: \w+ is matched to '[\w.() +]+' yet 20504777 ulps away"),
    ("census_out_of_scope_matched", "census.json",
     _first_where("classes", lambda c: not c["in_scope"], "catalog", "rms_norm.llama"),
     r"at classes\.\d+\.catalog: \w+ is out of scope but matched to 'rms_norm\.llama'"),
    ("census_model_catalog_not_its_classes", "census.json", _set("models.0.catalog", ["layer_norm.neox"]),
     r"at models\.0\.catalog: \['layer_norm\.neox'\] but its classes are matched to"),
    ("census_model_unknown_class", "census.json", _set("models.0.norm_classes", ["NoSuchRMSNorm"]),
     r"at models\.0\.norm_classes: 'NoSuchRMSNorm' is not a class of this census"),
    ("conformance_identical_above_cases", "conformance.json", _set("implementations.0.identical", lambda v: 13),
     r"at implementations\.0\.identical: 13 but its cases give \d+"),
    ("conformance_by_key_disagrees", "conformance.json", _set("by_key.hf_llama.max_ulp", 3),
     r"at by_key\.hf_llama: is not the implementation's row"),
    ("conformance_grid_disagrees", "conformance.json", _set("grid.hf_olmo_2.bfloat16 llama", 0.0),
     r"at grid\.hf_olmo_2\.bfloat16 llama: 0\.0 but its cases give 0\.\d+"),
    ("conformance_implementation_twice", "conformance.json", _append_copy("implementations"),
     r"at implementations\.0: 'hf_llama' is listed 2 times"),
    ("conformance_fraction_above_one", "conformance.json", _set("implementations.0.max_fraction_different", 1.5),
     r"at implementations\.0\.max_fraction_different: 1\.5 is a fraction outside \[0, 1\]"),
    ("conformance_identical_yet_different", "conformance.json", _set("cases.0.results.hf_olmo_2.identical", True),
     r"at cases\.0\.results\.hf_olmo_2\.identical: True but 0\.\d+ of the elements differ"),
    ("conformance_unknown_reference", "conformance.json", _set("cases.0.reference.module", "NoSuchRMSNorm"),
     r"at cases\.0\.reference\.module: 'NoSuchRMSNorm' is not a class of the census"),
    ("check_example_exit_status", "check_example.json", _set("cli_exit_status", 0),
     r"at cli_exit_status: 0 but the output reports '\d+ of \d+ cases FAIL'"),
    ("check_example_verdict_vs_counts", "check_example.json", _set("runs.gemma_rms_norm.failed", 1),
     r"at runs\.gemma_rms_norm\.verdict: 'all \d+ cases pass' but failed = 1"),
    ("check_example_unknown_function", "check_example.json",
     _set("command", lambda v: v.replace(":rounds_before_gain", ":no_such_function")),
     r"at command: .*no function 'no_such_function'"),
    ("check_example_unknown_closest", "check_example.json", _set("runs.eps_outside.closest", "rms_norm.banana"),
     r"at runs\.eps_outside\.closest: 'rms_norm\.banana' is not a catalog entry"),
    ("training_quick_flag", "training.json", _set("quick", True),
     r"at quick: True but provenance\.quick is False"),
    ("machine_key_of_another_cpu", "training.json", _set("provenance.machine.machine_key", "genuineintel-f6-m85-s7-avx512-2c"),
     r"at provenance\.machine\.machine_key: 'genuineintel-f6-m85-s7-avx512-2c' but the CPU identity beside it gives"),
    ("5000_digit_integer", "worked_example.json", ("text", '"d": 4', '"d": ' + HUGE),
     r"at d: an integer of 5000 digits is larger than any count"),
    ("numerics_histogram_short", "numerics.json", _set("casting.bfloat16.histogram_ulp_between.1", lambda v: v - 1),
     r"at casting\.bfloat16\.histogram_ulp_between: counts \d+ of \d+ elements"),
    ("numerics_adoption_unknown_class", "numerics.json", _set("adoption.llama.norm_class", "NoSuchRMSNorm"),
     r"at adoption\.llama\.norm_class: 'NoSuchRMSNorm' is not a class of the census"),
    ("advice_share_not_its_flops", "advice.json", _set("flop_share.llama.share", lambda v: 2 * v),
     r"at flop_share\.llama\.share: .* but norm / \(norm \+ matmul\) FLOPs is"),
    ("advice_jacobian_rank", "advice.json", _set("jacobian_rank.8.layernorm", 7),
     r"at jacobian_rank\.8\.layernorm: 7 but a 8-wide layernorm's Jacobian has rank 6"),
    ("cuda_totals_not_its_kernels", "cuda_resources.json", _set("totals.kernels", lambda v: v + 1),
     r"at totals\.kernels: \d+ but the kernels listed give \d+"),
    ("fp16_eps_not_rounded", "fp16_limits.json", _set("eps_in_float16.1e-05", 1e-05),
     r"at eps_in_float16\.1e-05: 1e-05 but 1e-05 rounds to"),
    ("index_unknown_model", "census_index.json", _set("models.no_such_model", {"norm_class": "LlamaRMSNorm",
     "module": None, "catalog": None, "eps": None, "gain": None, "gain_dtype": None, "qk_norm": None}),
     r"at models\.no_such_model: 'no_such_model' is not a traced model type of the census"),
    ("index_catalog_not_the_census", "census_index.json", _index_row("llama", "catalog", "rms_norm.gemma"),
     r"at models\.llama\.catalog: 'rms_norm\.gemma' but the census gives 'rms_norm\.llama'"),
    ("index_class_not_the_models", "census_index.json", _index_row("llama", "norm_class", "GemmaRMSNorm"),
     r"at models\.llama\.norm_class: 'GemmaRMSNorm' is not one of the census's classes of llama"),
    ("index_other_transformers", "census_index.json", _set("transformers", "4.0.0"),
     r"at transformers: '4\.0\.0' but the census read transformers"),
]


def _corrupted(tmp_path, name, edit) -> Path:
    from site_hooks import data as site_data

    source = site_data.INDEX if name == "census_index.json" else DATA / name
    text = source.read_text()
    if isinstance(edit, tuple):
        assert edit[1] in text, f"the fixture expects {name} to hold {edit[1]}"
        text = text.replace(edit[1], edit[2], 1)
    else:
        data = json.loads(text)
        edit(data)
        text = json.dumps(data, indent=1)
    folder = tmp_path / "data"
    folder.mkdir()
    return _write(folder, name, text)


@pytest.mark.guards("data:schemas")
@pytest.mark.parametrize("case,name,edit,message", DISAGREEING, ids=[c[0] for c in DISAGREEING])
def test_check_file_and_the_build_refuse_a_file_that_disagrees_with_itself(tmp_path, monkeypatch, case, name, edit,
                                                                          message):
    """Every case through the build's validator (site_hooks.data.validated() over a data folder holding the
    corrupted copy, the kit's census index read beside it or replaced by the corrupted one): the build
    stops with a MacroError naming the file and the field, and what it reports is schemas.check_file's
    own refusal of that file (its DataFileError, kept as the cause), so both paths are tried at once."""
    from site_hooks import data as site_data

    path = _corrupted(tmp_path, name, edit)
    expected = re.escape(name) + r"(?s:.*)(\n  |: )" + message
    monkeypatch.setattr(site_data, "DATA", path.parent)
    if name == "census_index.json":
        monkeypatch.setattr(site_data, "INDEX", path)
    site_data.clear_caches()
    try:
        with pytest.raises(MacroError, match=expected) as caught:
            site_data.validated()
    finally:
        site_data.clear_caches()
    cause = caught.value.__cause__
    assert isinstance(cause, schemas.DataFileError) and re.search(expected, str(cause)), cause


def test_every_committed_file_passes_the_consistency_checks():
    """The checks of consistency.py hold on what the project's commands wrote (the census index included),
    so each refusal above is the corruption's, not the committed file's."""
    from reference_impl.studies.schemas import consistency, invariants
    from site_hooks import data as site_data

    ours = [fn for fns in invariants._CHECKS.values() for fn in fns if fn.__module__ == consistency.__name__]
    assert {"census_self", "census_sources", "census_index", "conformance_self", "check_example_self",
            "machine_key_of_identity", "quick_flag", "fractions"} <= {fn.__name__ for fn in ours}
    for path in [*schemas.data_files(DATA), site_data.INDEX]:
        data = schemas.parse_json(path.read_text(), path.name)
        checks = invariants._CHECKS.get("*", []) + invariants._CHECKS.get(path.name, [])
        found = [p for fn in checks if fn in ours for p in fn(data, path.name)]
        assert found == [], (path.name, found)
