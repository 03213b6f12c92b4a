"""One install argument as a requirement: PEP 508, wheel and sdist file names, VCS URLs and source trees,
conda match specs (mapped to PyPI names, or skipped with a reason)."""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from dataclasses import dataclass

from .names import canonical_name, version_tuple

#: Conda package names whose PyPI distribution has another name.
CONDA_TO_PYPI: dict[str, str] = {
    "pytorch": "torch",
    "py-opencv": "opencv-python",
}
#: Conda package names (regular expressions, whole name) of builds of one PyPI distribution.
CONDA_PATTERNS_TO_PYPI: dict[str, str] = {
    r"dgl-cuda[\d.]+": "dgl",
}
#: Conda packages (regular expressions, matched against the whole name) that install no Python
#: distribution, with the reason they are left out.
CONDA_SKIP: dict[str, str] = {
    r"python": "the interpreter itself (recorded as the image's python)",
    r"curl|libcurl": "C library / command-line tool, no Python distribution",
    r"libgcc|libgcc-ng": "C runtime library, no Python distribution",
    r"mkl": "Intel MKL shared libraries (conda-forge package has no Python distribution)",
    r"mkl-include": "Intel MKL C headers, no Python distribution",
    r"cmake": "conda-forge's native cmake binary, no Python distribution",
    r"ninja": "conda-forge's native ninja binary, no Python distribution",
    r"typing": "backport of a standard-library module (stdlib since Python 3.5); nothing to import from it",
    r"magma-cuda\d+": "MAGMA GPU linear-algebra C library, no Python distribution",
    r"cuda-.*|pytorch-cuda": "CUDA toolkit / runtime selector packages, no Python distribution",
    r"cpuonly": "metapackage selecting CPU builds, no Python distribution",
    r"aws-ofi-nccl": "NCCL network plugin (C library), no Python distribution",
}
#: Repositories (``host/owner/name`` lower case) built from source, and the distribution they install.
SOURCE_TREES: dict[str, str] = {
    "github.com/nvidia/transformerengine": "transformer-engine",
    "github.com/nvidia/apex": "apex",
    "github.com/awslabs/sagemaker-debugger": "smdebug",
    "github.com/hazyresearch/flash-attention": "flash-attn",
    "github.com/dao-ailab/flash-attention": "flash-attn",
}

_NAME_RE = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[[^\]]*\])?\s*(.*)$")


@dataclass
class Requirement:
    """A requirement: canonical name, requirement text, and the exact version when pinned."""

    name: str  # canonical
    requirement: str
    version: str | None


def exact_version(specifier: str) -> str | None:
    """The version a specifier pins exactly (``==X`` without a wildcard, ``===X``), else ``None``."""
    spec = specifier.split(";")[0].strip()
    m = re.fullmatch(r"===\s*(\S+)", spec) or re.fullmatch(r"==\s*([^,*\s]+)", spec)
    return m.group(1) if m else None


def parse_pep508(text: str) -> Requirement | None:
    """``"Pillow[extra]>=9; marker"`` -> name ``pillow``, requirement with the name normalised."""
    text = text.strip()
    if " @ " in text:
        name_part, url = text.split(" @ ", 1)
        m = _NAME_RE.match(name_part.strip())
        if not m:
            return None
        extras = (m.group(2) or "").replace(" ", "")
        return Requirement(canonical_name(m.group(1)), f"{canonical_name(m.group(1))}{extras} @ {url.strip()}", None)
    m = _NAME_RE.match(text)
    if not m:
        return None
    name, extras, rest = m.group(1), (m.group(2) or "").replace(" ", ""), m.group(3).strip()
    marker = ""
    if ";" in rest:
        rest, marker = (x.strip() for x in rest.split(";", 1))
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    spec = re.sub(r"\s+", "", rest)
    if spec and not re.match(r"^(===|==|!=|~=|<=|>=|<|>)", spec):
        return None
    req = canonical_name(name) + extras + spec + (f"; {marker}" if marker else "")
    return Requirement(canonical_name(name), req, exact_version(spec))


def parse_wheel_filename(location: str) -> Requirement | None:
    """Name and version from a wheel URL or path (``%2B`` decoded); ``None`` if not a wheel name."""
    base = urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(location).path or location))
    if not base.endswith(".whl"):
        return None
    parts = base[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    name, version = canonical_name(parts[0]), parts[1]
    return Requirement(name, f"{name}=={version}", version)


def parse_sdist_filename(location: str) -> Requirement | None:
    """Name and version from a source archive URL (``name-1.2.tar.gz``)."""
    base = urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(location).path))
    m = re.fullmatch(r"(.+?)-(\d[^-]*)\.(tar\.gz|tar\.bz2|zip|tgz)", base)
    if not m:
        return None
    name = canonical_name(m.group(1))
    return Requirement(name, f"{name}=={m.group(2)}", m.group(2))


def repo_key(url: str) -> str:
    """``https://github.com/NVIDIA/apex.git`` -> ``github.com/nvidia/apex``."""
    url = re.sub(r"^git\+", "", url)
    parsed = urllib.parse.urlsplit(url)
    path = parsed.path.split("@")[0]
    path = re.sub(r"\.git$", "", path.rstrip("/"))
    return (parsed.netloc + path).lower()


def source_tree_distribution(url: str) -> str:
    """The distribution a repository builds (:data:`SOURCE_TREES`, else its name)."""
    key = repo_key(url)
    return SOURCE_TREES.get(key, canonical_name(key.rsplit("/", 1)[-1]))


def parse_vcs_requirement(text: str) -> Requirement | None:
    """``git+https://github.com/NVIDIA/TransformerEngine.git@release_v1.11`` -> transformer-engine."""
    if not re.match(r"^(git|hg|svn|bzr)\+", text):
        return None
    egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", text)
    url = text.split("#", 1)[0]
    name = canonical_name(egg.group(1)) if egg else source_tree_distribution(url)
    return Requirement(name, f"{name} @ {url}", None)


@dataclass
class CondaSpec:
    """A conda match spec: the conda name, and its PyPI requirement or why it is skipped."""

    name: str  # conda name as written (lower case)
    requirement: Requirement | None
    skipped: str | None  # reason, when the package installs no Python distribution


def conda_to_pypi(conda_name: str) -> str:
    """The PyPI distribution a conda package is (see :data:`CONDA_TO_PYPI`)."""
    for pattern, name in CONDA_PATTERNS_TO_PYPI.items():
        if re.fullmatch(pattern, conda_name):
            return name
    return CONDA_TO_PYPI.get(conda_name, conda_name)


def conda_skip_reason(conda_name: str) -> str | None:
    """Why a conda package is skipped (:data:`CONDA_SKIP`), ``None`` if it is a Python distribution."""
    for pattern, reason in CONDA_SKIP.items():
        if re.fullmatch(pattern, conda_name):
            return reason
    return None


def parse_conda_spec(text: str) -> CondaSpec | None:
    """A conda match spec (``name``, ``name=1.2``, ``name==1.2``, ``"name>=1,<2"``,
    ``channel::name``) mapped to a PyPI requirement or to its skip reason."""
    text = text.strip()
    if "::" in text:
        text = text.split("::", 1)[1]
    m = re.match(r"^([A-Za-z0-9_][A-Za-z0-9._-]*)\s*(.*)$", text)
    if not m:
        return None
    cname, rest = m.group(1).lower(), m.group(2).strip()
    reason = conda_skip_reason(cname)
    if reason:
        return CondaSpec(cname, None, reason)
    pypi = canonical_name(conda_to_pypi(cname))
    rest = re.sub(r"\s+", " ", rest)
    if rest and not re.match(r"^[=<>!~]", rest):  # "name 1.2 build"
        rest = "=" + rest.split(" ")[0]
    rest = rest.replace(" ", "")
    version: str | None = None
    if rest.startswith("=") and not rest.startswith("=="):
        value = rest[1:].split("=")[0]  # drop a build string
        if "*" in value or "," in value or "|" in value:
            spec = "==" + value
        elif len(version_tuple(value)) >= 3:
            spec, version = "==" + value, value
        else:
            spec = "==" + value + ".*"
    elif rest.startswith("=="):
        value = rest[2:].split("=")[0]
        spec = "==" + value
        version = exact_version(spec)
    else:
        spec = rest
    return CondaSpec(cname, Requirement(pypi, pypi + spec, version), None)
