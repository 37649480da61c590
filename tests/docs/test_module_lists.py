"""The README's table of the package's folders names every module and sub-package there is.

The table is prose (it says what each part holds), but its coverage is derived: every module file at the top
of ``reference_impl/`` is named in the ``reference_impl/`` row, every sub-package has a row of its own or is
named in that row, and every row's path and every file that row names exist. A module added, moved or removed without its line fails here.
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "reference_impl"
ROW = re.compile(r"^\| `([^`]+)` \| (.*) \|$", re.M)


def package_parts(package: Path = PACKAGE) -> tuple[list[str], list[str]]:
    """(the top-level module files, the sub-package folders) of the package."""
    modules = sorted(p.name for p in package.glob("*.py") if p.name != "__init__.py")
    packages = sorted(p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    return modules, packages


def readme_problems(readme: str, repo: Path = REPO) -> list[str]:
    rows = {path: text for path, text in ROW.findall(readme) if "/" in path and " " not in path}
    top = rows.get("reference_impl/", "")
    if not top:
        return ["the README has no `reference_impl/` row"]
    modules, packages = package_parts(repo / "reference_impl")
    out = [f"reference_impl/{m} is not named in the README's reference_impl/ row" for m in modules
           if f"`{m}`" not in top]
    out += [f"reference_impl/{p}/ has no README row and is not named in the reference_impl/ row" for p in packages
            if f"reference_impl/{p}/" not in rows and f"`{p}/`" not in top]
    out += [f"the README's row `{path}` names a folder that does not exist" for path in rows
            if not (repo / path).is_dir()]
    out += [f"the README's reference_impl/ row names {f}, which does not exist" for f in re.findall(r"`(\w+\.py)`", top)
            if not (repo / "reference_impl" / f).is_file() and not list((repo / "reference_impl").glob(f"*/{f}"))]
    return out


def test_the_readme_names_every_module_and_sub_package():
    problems = readme_problems((REPO / "README.md").read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_a_module_missing_from_the_readme_is_found(tmp_path):
    package = tmp_path / "reference_impl"
    (package / "kit").mkdir(parents=True)
    for f in ("__init__.py", "oracle.py", "new_module.py", "kit/__init__.py"):
        (package / f).write_text("")
    readme = ("| path | what |\n|---|---|\n| `reference_impl/` | the oracle (`oracle.py`), `removed.py` |\n"
              "| `gone/` | old |\n")
    assert readme_problems(readme, tmp_path) == [
        "reference_impl/new_module.py is not named in the README's reference_impl/ row",
        "reference_impl/kit/ has no README row and is not named in the reference_impl/ row",
        "the README's row `gone/` names a folder that does not exist",
        "the README's reference_impl/ row names removed.py, which does not exist"]


# ------------------------------------------------------------------------------------------ the API page

def api_modules(text: str) -> set[str]:
    """The modules docs/api.md renders (``::: module`` directives)."""
    return set(re.findall(r"^\s*::: (\S+)", text, re.M))


def catalog_code_modules() -> set[str]:
    """The modules that hold the code of a catalog entry (where its reference function is defined)."""
    from reference_impl.norms import CATALOG

    return {spec.reference.__module__ for spec in CATALOG.values()}


def test_the_api_page_shows_every_module_that_holds_a_norms_code():
    shown = api_modules((REPO / "docs" / "api.md").read_text(encoding="utf-8"))
    missing = sorted(catalog_code_modules() - shown)
    assert not missing, f"docs/api.md renders no ::: block for {missing}"
    assert {"reference_impl.check.kit", "reference_impl.symbolic", "reference_impl.tolerances"} <= shown
    assert "reference_impl.norms.rms_norm" not in api_modules("::: reference_impl.norms.layer_norm\n")
