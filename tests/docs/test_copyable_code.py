"""Code on the site runs when copied, and the API names the pages cite exist.

What "copyable" means here: a Python code block of a built page (``div.language-python.highlight``) that
has the copy button. The site turns the copy button on for every block (``content.code.copy``); a block
that is an excerpt of a module on purpose (it needs the rest of the module) turns it off with the
``no-copy`` class and says so in its title, which starts with "Excerpt of". So every Python block is
either copyable, or visibly an excerpt; a block without the button and without that title fails. The
"Find your model" page shows code in its cards from the JSON record it embeds; each card's code counts as
a copyable block too.

Each copyable block is written to a file in a temporary folder outside the checkout and run there in a
process of its own, forked from an interpreter started once with ``python -I`` (no ``PYTHONPATH``, no
user site, not the script's folder, so only the installed packages, torch and transformers among them,
can be imported; ``PYTHONPATH`` is removed from its environment too). That interpreter has imported
torch, numpy and the transformers modules of the families the check compares with, and nothing of the
block's; each block runs in a fresh child (a fresh namespace, its own folder as working directory, its
own output, a time limit), so no block sees another's state. It must run, and every function it defines
must find all the global names it uses (a function that calls a helper the block does not show would run
its ``def`` and fail only when called). A block that defines a model family's norm (a function named as
in ``reference_impl/standalone/``) is called on random inputs and compared bit for bit (``torch.equal``,
same dtype) with the family's module in the installed transformers.

The test of the dotted names is not a site test: every ``reference_impl.x.y`` a page's Markdown names, and
every `` `module.name` `` in backticks whose module is one of the package's, must exist. It is resolved
statically (the modules' syntax trees), so it builds and imports nothing.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SITE = REPO / "site"

# Python blocks on the pages that are excerpts on purpose (title "Excerpt of <file> ...", no copy button):
# read from the page sources, so the built site must show exactly these (no hand-kept count)
EXCERPT_FENCE = re.compile(r'^(?P<indent>[ \t]*)(?P<ticks>`{3,})\s*\{[^}]*\.no-copy[^}]*'
                           r'title="Excerpt of (?P<path>[^" ]+)[^"]*"[^}]*\}\s*$')


def declared_excerpts(docs: Path = DOCS) -> list[tuple[str, int, str, list[str]]]:
    """(page, line, the file the title names, the block's lines) of every excerpt block in the page sources."""
    out = []
    for page in sorted(docs.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = EXCERPT_FENCE.match(line)
            if not m:
                continue
            body = []
            for text in lines[i + 1:]:
                if text.strip() == m["ticks"]:
                    break
                body.append(text[len(m["indent"]):] if text.startswith(m["indent"]) else text)
            out.append((page.relative_to(docs.parent).as_posix(), i + 1, m["path"], body))
    return out

# Runs in the fresh interpreter: executes one block, lists unbound globals, checks family functions.
RUNNER = r'''
import builtins, dis, json, sys, types
from pathlib import Path

repo = Path(sys.argv[2]).resolve()
env = Path(sys.prefix).resolve()  # the environment may live inside the checkout (.venv): its packages are installed
bad_path = [p for p in sys.path if p and repo in (Path(p).resolve(), *Path(p).resolve().parents)
            and env not in (Path(p).resolve(), *Path(p).resolve().parents)]
if bad_path:
    raise SystemExit(f"the checkout is on sys.path: {bad_path}")
src = Path(sys.argv[1]).read_text()
ns = {"__name__": "__copied__"}
exec(compile(src, "copied block", "exec"), ns)


def codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from codes(c)


def functions(ns):
    for name, obj in list(ns.items()):
        if isinstance(obj, types.FunctionType) and obj.__globals__ is ns:
            yield name, obj
        elif isinstance(obj, type) and obj.__module__ == "__copied__":
            for attr, member in vars(obj).items():
                member = getattr(member, "__func__", member)
                if isinstance(member, types.FunctionType):
                    yield f"{name}.{attr}", member


unbound = sorted({f"{fname}: {ins.argval}" for fname, fn in functions(ns) for co in codes(fn.__code__)
                  for ins in dis.get_instructions(co)
                  if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval not in ns
                  and not hasattr(builtins, ins.argval)})
defined = sorted(name for name, _ in functions(ns))
checked = []
if not unbound:
    import importlib
    import torch

    def modeling(folder):
        return importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")

    def module(cls, w, **kw):
        m = cls(w.shape[0], **kw)
        m.weight = torch.nn.Parameter(w.clone())
        return m

    def same(a, b, what):
        a = a if isinstance(a, tuple) else (a,)
        b = b if isinstance(b, tuple) else (b,)
        for u, v in zip(a, b, strict=True):
            if u.dtype != v.dtype or u.shape != v.shape or not torch.equal(u, v):
                raise SystemExit(f"{what}: not bit-identical to the transformers module "
                                 f"(dtype {u.dtype} vs {v.dtype}, shape {tuple(u.shape)} vs {tuple(v.shape)})")

    RMS = {"llama_rms_norm": ("llama", "LlamaRMSNorm", 1.0), "gemma_rms_norm": ("gemma3", "Gemma3RMSNorm", 0.0),
           "t5_rms_norm": ("t5", "T5LayerNorm", 1.0), "olmo2_rms_norm": ("olmo2", "Olmo2RMSNorm", 1.0)}
    g = torch.Generator().manual_seed(0)
    cases = [(xd, wd, scale) for xd in (torch.bfloat16, torch.float16, torch.float32)
             for wd in (xd, torch.float32) for scale in (1e-3, 1.0, 30.0)]
    d, hd = 48, 8
    with torch.no_grad():
        for xd, wd, scale in cases:
            x = (torch.randn(3, 5, d, generator=g, dtype=torch.float64) * scale).to(xd)
            r = torch.randn(3, 5, d, generator=g, dtype=torch.float64).to(xd)
            label = f"x {xd}, w {wd}, scale {scale:g}"
            for name, (folder, cls, around) in RMS.items():
                if name in ns:
                    w = (around + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
                    m = module(getattr(modeling(folder), cls), w, eps=1e-6)
                    same(ns[name](x, w, 1e-6), m(x), f"{name} ({label})")
            w = (1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)).to(wd)
            if "torch_rms_norm" in ns and wd == xd:
                m = torch.nn.RMSNorm(d, eps=None, dtype=xd)
                m.weight.copy_(w)
                same(ns["torch_rms_norm"](x, w, None), m(x), f"torch_rms_norm ({label})")
            if "cohere_layer_norm" in ns:
                m = module(modeling("cohere").CohereLayerNorm, w, eps=1e-5)
                same(ns["cohere_layer_norm"](x + 2, w, 1e-5), m(x + 2), f"cohere_layer_norm ({label})")
            if "neox_layer_norm" in ns and wd == xd:
                m = torch.nn.LayerNorm(d, eps=1e-5, dtype=xd)
                m.weight.copy_(w)
                m.bias.copy_(w - 1)
                same(ns["neox_layer_norm"](x + 2, m.weight, m.bias, 1e-5), m(x + 2), f"neox_layer_norm ({label})")
            if "llama_add_rms_norm" in ns:
                m = module(modeling("llama").LlamaRMSNorm, w, eps=1e-6)
                same(ns["llama_add_rms_norm"](x, r, w, 1e-6), (m(r + x), r + x), f"llama_add_rms_norm ({label})")
            if "llama4_l2_norm" in ns:
                same(ns["llama4_l2_norm"](x, 1e-5), modeling("llama4").Llama4TextL2Norm(1e-5)(x), f"llama4_l2_norm ({label})")
            k = x[..., : d // 2]
            for name, folder, cls, around in (("qwen3_qk_norm", "qwen3", "Qwen3RMSNorm", 1.0),
                                              ("gemma3_qk_norm", "gemma3", "Gemma3RMSNorm", 0.0)):
                if name in ns:
                    wq = (around + 0.5 * torch.randn(hd, generator=g, dtype=torch.float64)).to(wd)
                    wk = (around + 0.5 * torch.randn(hd, generator=g, dtype=torch.float64)).to(wd)
                    mq = module(getattr(modeling(folder), cls), wq, eps=1e-6)
                    mk = module(getattr(modeling(folder), cls), wk, eps=1e-6)
                    want = (mq(x.view(3, 5, -1, hd)).reshape(3, 5, -1), mk(k.reshape(3, 5, -1, hd)).reshape(3, 5, -1))
                    same(ns[name](x, k, wq, wk, hd, 1e-6), want, f"{name} ({label})")
            if "olmo2_qk_norm" in ns:
                wq, wk = w, w[: d // 2]
                cls = modeling("olmo2").Olmo2RMSNorm
                same(ns["olmo2_qk_norm"](x, k, wq, wk, 1e-6), (module(cls, wq, eps=1e-6)(x), module(cls, wk, eps=1e-6)(k)),
                     f"olmo2_qk_norm ({label})")
    checked = sorted(n for n in ("llama_rms_norm", "gemma_rms_norm", "t5_rms_norm", "olmo2_rms_norm", "torch_rms_norm",
                                 "cohere_layer_norm", "neox_layer_norm", "llama_add_rms_norm", "llama4_l2_norm",
                                 "qwen3_qk_norm", "gemma3_qk_norm", "olmo2_qk_norm") if n in ns)
print(json.dumps({"defined": defined, "unbound": unbound, "family_checked": checked}))
'''


def python_blocks(site: Path):
    """(page, index, code, title, copyable) for every Python code block of the site's Markdown pages."""
    from bs4 import BeautifulSoup

    out = []
    for page in sorted(site.rglob("index.html")):
        rel = page.relative_to(site).parent.as_posix()
        rel = "index" if rel == "." else rel
        if rel.startswith(("notebooks", "assets", "api")):
            continue  # notebook pages (executed at build time) and the API reference hold no copy blocks
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for i, div in enumerate(soup.select("div.highlight.language-python, div.highlight.language-py")):
            title = div.find("span", class_="filename")
            code = div.find("code")
            out.append((rel or "index", i, code.get_text(), title.get_text() if title else "",
                        "no-copy" not in div.get("class", [])))
        data = soup.find("script", id="mf-data")  # the model finder: its cards show each convention's code to copy
        if data is not None:
            for entry, rec in sorted(json.loads(data.string)["catalog"].items()):
                if rec.get("code"):
                    out.append((rel, f"card {entry}", rec["code"]["code"], rec["code"]["file"], True))
    return out


BLOCK_TIMEOUT_S = 300

# Started once with ``python -I`` in a temporary folder: imports torch, numpy and the transformers modules
# of the families (most of a block's start-up time), then for each request line ``{"dir": ..., "block": ..., "repo": ...}`` forks a child that runs RUNNER
# on the block with the block's folder as working directory and its stdout/stderr in files there, and answers
# one line ``{"rc": ...}`` (rc None: killed at the time limit). The server itself runs no torch operation, so
# no thread pool exists when it forks.
SERVER = r'''
import json, os, signal, sys, time, traceback

import importlib

import numpy
import torch

# the transformers modules RUNNER compares the families' functions with (importing one takes seconds); one
# that does not import here is left to the child, which then reports the error as the block's
for folder in ("llama", "gemma3", "t5", "olmo2", "cohere", "qwen3", "llama4"):
    try:
        importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    except Exception:
        pass

runner_path = sys.argv[1]
runner = compile(open(runner_path).read(), runner_path, "exec")
timeout = float(sys.argv[2])


def child(req):
    os.setpgid(0, 0)
    os.chdir(req["dir"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
        out = os.open(os.path.join(req["dir"], name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    sys.argv = [runner_path, req["block"], req["repo"]]
    rc = 0
    try:
        exec(runner, {"__name__": "__main__", "__file__": runner_path})
    except SystemExit as exc:  # as the interpreter does: an int is the status, anything else is printed
        if exc.code is None or isinstance(exc.code, int):
            rc = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            rc = 1
    except BaseException:
        traceback.print_exc()
        rc = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(rc)


for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            child(req)
        finally:
            os._exit(70)
    deadline = time.monotonic() + timeout
    rc = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever the block started and left running
    except ProcessLookupError:
        pass
    print(json.dumps({"rc": rc}), flush=True)
'''


class BlockRunner:
    """The ``python -I`` fork server above, started on first use, in ``tmp`` (outside the checkout)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.proc = None

    def _start(self):
        self.tmp.mkdir(parents=True, exist_ok=True)
        (self.tmp / "runner.py").write_text(RUNNER)
        (self.tmp / "server.py").write_text(SERVER)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.log = open(self.tmp / "server.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-I", str(self.tmp / "server.py"), str(self.tmp / "runner.py"),
                                      str(BLOCK_TIMEOUT_S)], cwd=self.tmp, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)

    def run(self, code: str, folder: Path) -> dict:
        """Runs one block in a fresh child, in ``folder``; returns the runner's report."""
        if self.proc is None:
            self._start()
        folder.mkdir(parents=True, exist_ok=True)
        block = folder / "block.py"
        block.write_text(code)
        self.proc.stdin.write(json.dumps({"dir": str(folder), "block": str(block), "repo": str(REPO)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.log.flush()
            raise RuntimeError(f"the block runner stopped:\n{(self.tmp / 'server.log').read_text()[-3000:]}")
        rc = json.loads(line)["rc"]
        stdout, stderr = (folder / "stdout.txt").read_text(), (folder / "stderr.txt").read_text()
        if rc is None:
            return {"error": f"still running after {BLOCK_TIMEOUT_S} s (killed)\n{(stderr or stdout)[-3000:]}"}
        if rc != 0:
            return {"error": (stderr or stdout)[-3000:] or f"exit status {rc}"}
        return json.loads(stdout.strip().splitlines()[-1])

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.log.close()
            self.proc = None


@pytest.fixture(scope="module")
def built_site() -> Path:
    """The built site: tests/site/test_build.py builds it first in a ``make test`` session."""
    if not (SITE / "index.html").is_file():
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(SITE)], cwd=REPO,
                              capture_output=True, text=True, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), timeout=1800)
        assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return SITE


def check_copyable_blocks(site: Path, tmp: Path) -> dict:
    blocks = python_blocks(site)
    runner = BlockRunner(tmp / "runner")
    try:
        return _check_blocks(blocks, runner, tmp)
    finally:
        runner.close()


def _check_blocks(blocks, runner: BlockRunner, tmp: Path) -> dict:
    failures, excerpts, family = [], [], set()
    for page, i, code, title, copyable in blocks:
        where = f"{page}/ block {i}" + (f" ({title})" if title else "")
        if not copyable:
            if not title.startswith("Excerpt of "):
                failures.append(f"{where}: no copy button, but its title does not say it is an excerpt")
            excerpts.append(where)
            continue
        if title.startswith("Excerpt of "):
            failures.append(f"{where}: titled an excerpt but has the copy button")
            continue
        report = runner.run(code, tmp / f"{page.replace('/', '_')}_{i}".replace(" ", "_"))
        if "error" in report:
            failures.append(f"{where}: does not run on its own:\n{report['error']}")
        elif report["unbound"]:
            failures.append(f"{where}: uses names the block does not define or import: {report['unbound']}")
        family.update(report.get("family_checked", []))
    return {"blocks": len(blocks), "excerpts": excerpts, "failures": failures, "family": sorted(family)}


@pytest.mark.site
@pytest.mark.guards("site.copyable_code")
def test_every_copyable_block_runs_on_its_own(built_site, tmp_path):
    result = check_copyable_blocks(built_site, tmp_path)
    assert not result["failures"], "\n\n".join(result["failures"])
    copyable = result["blocks"] - len(result["excerpts"])
    assert copyable >= 20, f"only {copyable} copyable Python blocks found: is the extraction still right?"
    declared = declared_excerpts()
    assert len(result["excerpts"]) == len(declared), (
        f"{len(result['excerpts'])} excerpt blocks on the built site, {len(declared)} in the page sources:\n"
        + "\n".join(result["excerpts"]))
    # the families' copyable functions (numerics page) were each compared with the transformers module
    assert {"llama_rms_norm", "gemma_rms_norm", "t5_rms_norm", "olmo2_rms_norm", "torch_rms_norm", "cohere_layer_norm",
            "neox_layer_norm", "llama_add_rms_norm", "qwen3_qk_norm", "gemma3_qk_norm", "olmo2_qk_norm"} <= set(result["family"])


def _excerpt_problems(declared) -> list[str]:
    out = []
    for page, line, path, body in declared:
        if not (REPO / path).is_file():
            out.append(f"{page}:{line}: the excerpt names {path}, which does not exist")
        embeds = [b for b in body if b.strip().startswith("--8<--")]
        if not embeds or not all(f'"{path}' in b for b in embeds):
            out.append(f"{page}:{line}: the block does not embed {path}")
    return out


def test_every_excerpt_embeds_the_file_its_title_names(tmp_path):
    """An excerpt is the tested file itself: its block includes (pymdownx.snippets) the file its title names,
    which exists; a pasted copy or a title naming another file fails."""
    declared = declared_excerpts()
    assert len(declared) >= 1 and not _excerpt_problems(declared), _excerpt_problems(declared)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.md").write_text('Text.\n\n    ``` { .python .no-copy title="Excerpt of reference_impl/oracle.py" }\n'
                                  '    def pasted(x):\n        return x\n    ```\n')
    planted = declared_excerpts(docs)
    assert [(p[1], p[2]) for p in planted] == [(3, "reference_impl/oracle.py")]
    assert "does not embed reference_impl/oracle.py" in _excerpt_problems(planted)[0]


# ------------------------------------------------------------------ dotted names in the pages' prose

DOTTED = re.compile(r"\breference_impl(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
BACKTICKED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_.]*)[`(]")
FILE_SUFFIXES = {"py", "ipynb", "json", "yaml", "yml", "md", "cpp", "h", "cu", "cuh", "svg", "txt", "toml", "html", "js", "css"}


def _top_level_names(path: Path) -> tuple[set[str], dict[str, ast.ClassDef]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names, classes = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            classes[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
            if any(getattr(t, "id", "") == "__all__" for t in node.targets) and isinstance(node.value, (ast.List, ast.Tuple)):
                names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names, classes


def _class_members(cls: ast.ClassDef) -> set[str]:
    out = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)  # dataclass fields
    return out


def resolve(dotted: str) -> str | None:
    """None when ``reference_impl.a.b.c`` exists (module, then attribute, then class member); else why not."""
    parts = dotted.split(".")
    path = REPO / parts[0]
    i = 1
    while i < len(parts) and ((path / parts[i]).is_dir() or (path / f"{parts[i]}.py").is_file()):
        path = path / parts[i] if (path / parts[i]).is_dir() else path / f"{parts[i]}.py"
        i += 1
    if i == len(parts):
        return None
    module = path / "__init__.py" if path.is_dir() else path
    if not module.is_file():
        return f"{'.'.join(parts[:i])} is a folder without __init__.py"
    names, classes = _top_level_names(module)
    if parts[i] not in names:
        return f"{'.'.join(parts[:i])} has no {parts[i]!r}"
    if i + 1 < len(parts) and parts[i] in classes:
        if parts[i + 1] not in _class_members(classes[parts[i]]):
            return f"class {'.'.join(parts[:i + 1])} has no {parts[i + 1]!r}"
    return None


def _package_modules() -> set[str]:
    pkg = REPO / "reference_impl"
    mods = {p.stem for p in pkg.rglob("*.py") if p.stem != "__init__"}
    mods |= {p.name for p in pkg.rglob("*") if p.is_dir() and (p / "__init__.py").is_file()}
    return mods


def _full_name(module: str) -> str | None:
    """``shared`` -> ``reference_impl.shared``; None when the short name is ambiguous."""
    pkg = REPO / "reference_impl"
    hits = [p for p in pkg.rglob(f"{module}.py")] + [p for p in pkg.rglob(module) if (p / "__init__.py").is_file()]
    if len(hits) != 1:
        return None
    rel = hits[0].relative_to(REPO).with_suffix("") if hits[0].suffix == ".py" else hits[0].relative_to(REPO)
    return ".".join(rel.parts)


def _catalog_entry_names() -> set[str]:
    """The catalog's entry names (``rms_norm.llama``, ``gated_rms_norm.mamba2``, ...): a page citing one
    names an entry, not a module attribute. (The only import of the name check: the catalog builds its names.)"""
    from reference_impl.norms import CATALOG

    return set(CATALOG)


def cited_names() -> list[tuple[str, str]]:
    """(page, dotted name) for every API name the pages cite (catalog entry names aside)."""
    modules = _package_modules()
    entries = _catalog_entry_names()
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        rel = page.relative_to(DOCS).as_posix()
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.lstrip().startswith("--8<--"):
                continue
            for m in DOTTED.finditer(line):
                out.append((rel, m.group(0)))
            for m in BACKTICKED.finditer(line):
                mod, rest = m.group(1), m.group(2).rstrip(".")
                if f"{mod}.{rest}" in entries:
                    continue
                if mod in modules and mod != "reference_impl" and rest.split(".")[-1] not in FILE_SUFFIXES:
                    full = _full_name(mod)
                    if full is not None:
                        out.append((rel, f"{full}.{rest}"))
    return out


@pytest.mark.guards("docs.api_names")
def test_every_cited_api_name_exists():
    cited = cited_names()
    assert len(cited) >= 30, f"only {len(cited)} dotted names found in docs/: is the extraction still right?"
    missing = sorted({f"{page}: {name}: {why}" for page, name in cited if (why := resolve(name))})
    assert not missing, "names the pages cite that do not exist:\n" + "\n".join(missing)


def test_the_name_check_catches_a_missing_name():
    """The resolver itself: an existing function, a module, a class member, and three that do not exist."""
    assert resolve("reference_impl.shared.apply_gain") is None
    assert resolve("reference_impl.ops.build") is None
    assert resolve("reference_impl.norms.spec.NormSpec.sample") is None
    assert "no 'backward_bounds'" in resolve("reference_impl.shared.backward_bounds")
    assert resolve("reference_impl.norms.spec.NormSpec.no_such_member") is not None
    assert resolve("reference_impl.no_such_module") is not None
    # catalog entry names are not API names; a dotted name that is neither still counts
    entries = _catalog_entry_names()
    assert {"rms_norm.llama", "gated_rms_norm.mamba2", "layer_norm.neox"} <= entries
    assert "rms_norm.no_such_entry" not in entries


def test_the_block_check_catches_what_does_not_run(tmp_path):
    """The check itself, on a small built page: a block whose function calls a helper it does not show, an
    uncopyable block that does not say it is an excerpt, and a family function with Llama's order written
    wrong (gain before the cast) fail; a correct family function, a marked excerpt, and a block that checks
    it does not see the state the block before it left (nor its working folder on sys.path) pass."""
    good = "import torch\n\n\ndef llama_rms_norm(x, weight, eps=1e-6):\n    h = x.float()\n" \
           "    h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)\n    return weight * h\n"
    wrong = good.replace("(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)\n    return weight * h",
                         "h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)\n    return (weight * h).to(x.dtype)")
    helper = "import torch\n\n\ndef f(x):\n    return compute_dtype(x)\n"

    def block(code, cls="", title=""):
        t = f'<span class="filename">{title}</span>' if title else ""
        return f'<div class="language-python {cls} highlight">{t}<pre><code>{code}</code></pre></div>'

    page = tmp_path / "site" / "p" / "index.html"
    page.parent.mkdir(parents=True)
    # one block changes the interpreter's state; the next must not see it (each runs in a fresh process)
    leak = "import sys, torch\n\ntorch.set_default_dtype(torch.float64)\nsys.modules['leaked'] = sys\n"
    fresh = "import os, sys, torch\n\nassert torch.get_default_dtype() == torch.float32 and 'leaked' not in sys.modules\n" \
            "assert os.getcwd() not in sys.path and '' not in sys.path\n"
    page.write_text("<html><body>" + block(good) + block(wrong) + block(helper) + block("x = 1", "no-copy")
                    + block("y = z", "no-copy", "Excerpt of somewhere.py") + block(leak) + block(fresh) + "</body></html>")
    result = check_copyable_blocks(tmp_path / "site", tmp_path / "runs")
    assert result["blocks"] == 7 and len(result["excerpts"]) == 2
    assert result["family"] == ["llama_rms_norm"]
    text = "\n".join(result["failures"])
    assert len(result["failures"]) == 3, text
    assert "not bit-identical" in text and "compute_dtype" in text and "does not say it is an excerpt" in text
