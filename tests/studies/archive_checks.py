"""What every machine archive's tests check, shared by the distributed and rsqrt archives' test modules: a
corrupt file, a misnamed file, a --quick run and broken JSON are each refused by the archive's
``check_archived`` with an error that names the file; the site's table of machines shows every filed run and
refuses an empty or corrupt archive by name."""
from __future__ import annotations

import json

import pytest

from reference_impl.studies.schemas import DataFileError


def refuses_a_corrupt_file(archive, tmp_path, break_it, words: str) -> None:
    path, data = archive.archived()[0]
    broken = json.loads(json.dumps(data))
    break_it(broken)
    bad = tmp_path / path.name
    bad.write_text(json.dumps(broken))
    with pytest.raises(DataFileError, match=path.name) as err:
        archive.check_archived(bad)
    assert words in str(err.value)


def refuses_misnamed_quick_and_truncated_files(archive, tmp_path) -> None:
    path, data = archive.archived()[0]
    misnamed = tmp_path / "someone-else-2c.json"
    misnamed.write_text(json.dumps(data))
    with pytest.raises(DataFileError, match=r"someone-else-2c\.json.*must be named"):
        archive.check_archived(misnamed)
    quick = tmp_path / path.name
    quick.write_text(json.dumps({**data, "provenance": {**data["provenance"], "quick": True}}))
    with pytest.raises(DataFileError, match=rf"{path.name}.*--quick"):
        archive.check_archived(quick)
    truncated = tmp_path / "cut.json"
    truncated.write_text(path.read_text()[:500])
    with pytest.raises(DataFileError, match="cut.json"):
        archive.check_archived(truncated)


def macro_table_then_refusals(archive, macro, src_path: str, tmp_path, monkeypatch) -> str:
    """The macro's table for the committed archive (returned for the caller's own checks: one line per
    machine below the header), then the same macro over an empty and over a corrupt archive folder."""
    from site_hooks.macros import MacroError

    class Ctx:
        pass

    Ctx.src_path = src_path
    table = macro(Ctx())
    assert table.count("\n") == len(archive.archived()) + 1
    monkeypatch.setattr(archive.archived, "__defaults__", (tmp_path,))
    with pytest.raises(MacroError, match="holds no machine file"):
        macro(Ctx())
    (tmp_path / "x.json").write_text("{ not json")
    with pytest.raises(MacroError, match="x.json"):
        macro(Ctx())
    return table
