"""Where each engine's released code comes from, fetched at run time into an ignored cache.

A :class:`Release` is one pinned release of one engine: a package on PyPI (a wheel, fetched with
``pip download --no-deps``, or a source archive fetched through the registry's simple index and checked
against the sha256 the index publishes), or a package already installed as a test dependency
(Liger-Kernel, transformers). Nothing is installed: files are read out of the archive. Every file a row
uses is recorded with its path inside the release and its sha256, so a reader can check that the file
read is the released one. The project holds no copy of any of it.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...provenance import REPO

CACHE = REPO / ".cache" / "engines"
INDEX = "https://pypi.org/simple/{name}/"


class Unavailable(RuntimeError):
    """A release or one of its files could not be obtained here; the message says what happened."""


@dataclass(frozen=True)
class Release:
    """One pinned release. ``kind``: "wheel" (pip download), "sdist" (the index's source archive) or
    "installed" (a test dependency, read where it is installed; its version is checked)."""

    key: str
    engine: str
    package: str
    version: str
    kind: str
    role: str  # "server", "trainer" or "reference"
    url: str  # the project's home, for the page

    @property
    def source(self) -> str:
        where = {"wheel": "PyPI wheel", "sdist": "PyPI source archive", "installed": "installed package"}[self.kind]
        return f"{self.package}=={self.version} ({where})"


RELEASES = {r.key: r for r in (
    Release("transformers", "transformers", "transformers", "5.24.0", "installed", "reference",
            "https://github.com/huggingface/transformers"),
    Release("vllm", "vLLM", "vllm", "0.34.0", "wheel", "server", "https://github.com/vllm-project/vllm"),
    Release("sglang", "SGLang", "sglang", "0.5.23", "wheel", "server", "https://github.com/sgl-project/sglang"),
    Release("tensorrt_llm", "TensorRT-LLM", "tensorrt-llm", "1.2.1", "wheel", "server",
            "https://github.com/NVIDIA/TensorRT-LLM"),
    Release("megatron", "Megatron-core", "megatron-core", "0.16.1", "wheel", "trainer",
            "https://github.com/NVIDIA/Megatron-LM"),
    Release("te", "Transformer Engine", "transformer-engine", "2.20.2", "wheel", "trainer",
            "https://github.com/NVIDIA/TransformerEngine"),
    Release("liger", "Liger-Kernel", "liger-kernel", "0.8.5", "installed", "trainer",
            "https://github.com/linkedin/Liger-Kernel"),
    Release("mlx", "MLX", "mlx-lm", "0.32.2", "wheel", "server", "https://github.com/ml-explore/mlx-lm"),
    Release("mlx_core", "MLX", "mlx", "0.32.4", "wheel", "server", "https://github.com/ml-explore/mlx"),
    Release("llamacpp", "llama.cpp", "llama-cpp-python", "0.3.36", "sdist", "server",
            "https://github.com/ggml-org/llama.cpp"),
)}
#: packages a release needs beside its own to run here (MLX's CPU library), fetched the same way
COMPANIONS = {"mlx": (("mlx", "0.32.4"), ("mlx-cpu", "0.32.4"))}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pip_wheel(package: str, version: str, dest: Path, timeout: int) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    norm = package.replace("-", "_").lower()
    found = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{norm}-{version}-")]
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", f"{package}=={version}",
           "-d", str(dest), "--quiet"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise Unavailable(f"pip download {package}=={version} ran past {timeout} s") from exc
    found = [p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{norm}-{version}-")]
    if done.returncode or not found:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise Unavailable(f"pip download --no-deps --only-binary :all: {package}=={version} failed "
                          f"({last[0][:200]}); {_listing(package, version)}")
    return found[0]


def _index_files(package: str, timeout: int = 60) -> list[dict]:
    req = urllib.request.Request(INDEX.format(name=package), headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["files"]


def _listing(package: str, version: str) -> str:
    """What the registry's index does hold for a package, in words (why a wheel could not be had)."""
    try:
        files = _index_files(package)
    except OSError as exc:
        return f"the index could not be read ({exc})"
    wheels = [f for f in files if f["filename"].endswith(".whl")]
    sdists = [f for f in files if f["filename"].endswith(".tar.gz")]
    biggest = max((f.get("size") or 0 for f in sdists), default=0)
    return (f"the index lists {len(files)} files for {package}, {len(wheels)} of them wheels; its largest source "
            f"archive has {biggest} bytes")


def _sdist(package: str, version: str, dest: Path, timeout: int) -> Path:
    """The source archive from the registry's simple index (PEP 691 JSON), checked against its sha256."""
    dest.mkdir(parents=True, exist_ok=True)
    files = _index_files(package, timeout)
    want = [f for f in files if f["filename"].endswith(".tar.gz") and f"-{version}.tar.gz" in f["filename"]]
    if not want:
        raise Unavailable(f"the index lists no source archive of {package}=={version}")
    f = want[0]
    path = dest / f["filename"]
    if not (path.exists() and sha256(path.read_bytes()) == f["hashes"]["sha256"]):
        with urllib.request.urlopen(f["url"], timeout=timeout) as r:
            data = r.read()
        if sha256(data) != f["hashes"]["sha256"]:
            raise Unavailable(f"{f['filename']}: sha256 differs from the index's")
        path.write_bytes(data)
    return path


class Archive:
    """Read files of one fetched release by their path inside it."""

    def __init__(self, release: Release, path: Path | None):
        self.release, self.path = release, path
        self._zip = zipfile.ZipFile(path) if path is not None and path.suffix == ".whl" else None
        self._tar = tarfile.open(path) if path is not None and path.name.endswith(".tar.gz") else None
        self._prefix = ""
        if self._tar is not None:
            first = self._tar.next()
            self._prefix = first.name.split("/")[0] + "/"

    def read(self, member: str) -> bytes:
        if self.release.kind == "installed":
            top = member.split("/")[0]
            spec = importlib.util.find_spec(top)
            if spec is None or not spec.submodule_search_locations:
                raise Unavailable(f"{self.release.package} is not installed here")
            p = Path(list(spec.submodule_search_locations)[0]).parent / member
            if not p.is_file():
                raise Unavailable(f"{member} is not in the installed {self.release.package}")
            return p.read_bytes()
        try:
            if self._zip is not None:
                return self._zip.read(member)
            f = self._tar.extractfile(self._prefix + member)
            if f is None:
                raise KeyError(member)
            return f.read()
        except KeyError as exc:
            raise Unavailable(f"{member} is not in {self.path.name}") from exc

    def names(self) -> list[str]:
        if self._zip is not None:
            return self._zip.namelist()
        if self._tar is not None:
            return [n[len(self._prefix):] for n in self._tar.getnames()]
        return []


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def open_release(release: Release, cache: Path = CACHE, download: bool = True, timeout: int = 900) -> Archive:
    """The release's archive; ``download=False`` uses only what the cache (or the installation) holds."""
    if release.kind == "installed":
        have = installed_version(release.package)
        if have != release.version:
            raise Unavailable(f"{release.package} {have or 'is not installed'} here, the study pins {release.version}")
        return Archive(release, None)
    dest = cache / "dl" / release.package
    if release.kind == "wheel":
        norm = release.package.replace("-", "_").lower()
        found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{norm}-{release.version}-"))
        if found:
            return Archive(release, found[0])
        if not download:
            raise Unavailable(f"{release.package}=={release.version} is not in the cache {dest}")
        return Archive(release, _pip_wheel(release.package, release.version, dest, timeout))
    found = sorted(dest.glob(f"*-{release.version}.tar.gz"))
    if found:
        return Archive(release, found[0])
    if not download:
        raise Unavailable(f"{release.package}=={release.version} is not in the cache {dest}")
    return Archive(release, _sdist(release.package, release.version, dest, timeout))


def companion_path(key: str, cache: Path = CACHE, download: bool = True) -> Path:
    """The companion wheels of a release (``COMPANIONS``) unpacked into one folder, for ``sys.path`` (MLX's
    core looks for its library next to itself, so both wheels share the folder)."""
    dest = cache / "unpacked" / (key + "-" + "-".join(f"{p}{v}" for p, v in COMPANIONS.get(key, ())))
    for package, version in COMPANIONS.get(key, ()):
        rel = Release(key, key, package, version, "wheel", "server", "")
        arch = open_release(rel, cache, download)
        marker = dest / f".{package}"
        if not marker.exists():
            arch._zip.extractall(dest)
            marker.write_text(arch.path.name)
    return dest
