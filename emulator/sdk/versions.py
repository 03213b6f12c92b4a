"""Which SageMaker Python SDK major is installed here (2 or 3), found without importing it.

SDK v2 (``sagemaker`` 2.x) and v3 (the ``sagemaker`` 3.x meta-package over ``sagemaker-core`` 2.x,
``sagemaker-train``, ``sagemaker-serve``, ``sagemaker-mlops``) both install the top-level package
``sagemaker``, so one environment holds one of them. Installing one over the other leaves a mix
behind (e.g. ``pip install 'sagemaker<3'`` over v3 keeps ``sagemaker-train``'s ``sagemaker/train``
next to v2's files; v2 imports, v3's launch API half-works), which :func:`installed_major` refuses
with :class:`BrokenSdkInstall` naming what it found and how to fix it.

Evidence read: the installed distributions' versions (``importlib.metadata``) and the files of the
``sagemaker`` package that ``import sagemaker`` would load (``estimator.py`` is v2's, ``train/``
v3's).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import RequestError

#: Distributions that exist only with SDK v3 (v2 pins ``sagemaker-core<2``).
V3_ONLY_DISTS = ("sagemaker-train", "sagemaker-serve", "sagemaker-mlops")
FIX = ("use one environment per SDK major: `pip install 'sagemaker-cluster-emulator[sdk]'` (v2) or "
       "`[sdk3]` (v3) in a fresh venv, or `pip uninstall -y sagemaker sagemaker-core sagemaker-train "
       "sagemaker-serve sagemaker-mlops` and install the one you want")


class BrokenSdkInstall(RequestError):
    """SDK v2 and v3 pieces are installed together."""


@dataclass(frozen=True)
class SdkInstall:
    """What is installed: the ``sagemaker`` distribution and the package files it left."""

    version: str | None  # of the `sagemaker` distribution
    core_version: str | None  # of `sagemaker-core`
    v3_only: tuple[str, ...]  # "name version" of V3_ONLY_DISTS present
    package_dirs: tuple[Path, ...]  # where `import sagemaker` finds its files
    v2_files: bool  # sagemaker/estimator.py present
    v3_files: bool  # sagemaker/train/ present

    @property
    def major(self) -> int | None:
        return int(self.version.split(".")[0]) if self.version and self.version[0].isdigit() else None

    def problems(self) -> list[str]:
        out = []
        if self.v2_files and self.v3_files:
            where = ", ".join(str(d) for d in self.package_dirs)
            out.append(f"the `sagemaker` package in {where} has both v2 files (estimator.py) and v3 files (train/)")
        if self.major == 2 and self.v3_only:
            out.append(f"sagemaker {self.version} (v2) is installed together with {', '.join(self.v3_only)} (v3)")
        if self.major == 2 and self.core_version and self.core_version.split(".")[0] not in ("0", "1"):
            out.append(f"sagemaker {self.version} (v2) is installed with sagemaker-core {self.core_version} "
                       "(v3's; v2 needs sagemaker-core<2)")
        if self.major == 3 and self.v2_files:
            out.append(f"sagemaker {self.version} (v3) is installed but the package still has v2 files (estimator.py)")
        return out


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def inspect() -> SdkInstall:
    """Read what is installed (imports nothing of the SDK)."""
    spec = importlib.util.find_spec("sagemaker")
    dirs = tuple(Path(p) for p in (spec.submodule_search_locations or [])) if spec is not None else ()
    return SdkInstall(
        version=_version("sagemaker"), core_version=_version("sagemaker-core"),
        v3_only=tuple(f"{n} {v}" for n in V3_ONLY_DISTS if (v := _version(n)) is not None),
        package_dirs=dirs,
        v2_files=any((d / "estimator.py").is_file() for d in dirs),
        v3_files=any((d / "train").is_dir() for d in dirs))


def installed_major() -> int | None:
    """2 or 3, or None when no SageMaker SDK is installed; :class:`BrokenSdkInstall` for a mix."""
    found = inspect()
    problems = found.problems()
    if problems:
        raise BrokenSdkInstall("sagemaker", "SageMaker Python SDK v2 and v3 are both installed: "
                               + "; ".join(problems) + ". They install the same `sagemaker` package and "
                               "cannot share one environment", allowed=FIX)
    if not found.package_dirs:
        return None
    if found.major in (2, 3):
        return found.major
    return 3 if found.v3_files else 2
