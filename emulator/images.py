"""Which docker image a job runs, and building a framework family's image on first use.

No ``framework_version`` (or ``"current"``) runs the default image, ``sagemaker-emulator:latest``,
exactly as before. A framework family (:mod:`emulator.frameworks`) runs
``sagemaker-emulator:torch<family>-<hash of its inputs>``, built by ``docker/build.py
--framework <family>`` the first time it is needed (progress lines and an estimate on the
console, the full output in a log file), then reused; ``nox -s image -- --framework 1.12`` builds
it ahead. The build needs this project's ``docker/`` folder (a source checkout).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .errors import BackendUnavailable
from .frameworks import Family, Selection

DEFAULT_IMAGE = "sagemaker-emulator:latest"
BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "docker" / "build.py"
LOGS = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sagemaker-emulator" / "images"
#: Lines of the build's output shown on the console (the rest goes to the log).
PROGRESS_PREFIXES = ("image:", "build-base: built", "build-base: debootstrap")


def _build_module() -> ModuleType:
    if not BUILD_SCRIPT.is_file():
        raise BackendUnavailable(
            f"framework images are built from the project's docker/ folder, not found at "
            f"{BUILD_SCRIPT.parent}; use a source checkout, or framework_version='current'")
    spec = importlib.util.spec_from_file_location("_sm_emulator_docker_build", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def family_image(fam: Family) -> str | None:
    """The tag of ``fam``'s image if it is built for the current inputs, else None."""
    build = _build_module()
    tag = build.family_tag(fam)
    return tag if tag and build._image_id(tag) else None


def _run_build(fam: Family, log: Path, say: Callable[[str], None]) -> None:
    cmd = [sys.executable, str(BUILD_SCRIPT), "--framework", fam.name]
    with log.open("w") as out, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL, cwd=BUILD_SCRIPT.parents[1]) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            if line.startswith(PROGRESS_PREFIXES):
                say(line.rstrip())
        status = proc.wait()
    if status != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise BackendUnavailable(f"building the torch {fam.name} image failed (exit {status}); "
                                 f"full log: {log}\n{tail}")


def image_for(selection: Selection | None, *, say: Callable[[str], None] = print) -> str:
    """The image every host of a job with ``selection`` runs; builds a family image once (under
    a lock, so parallel jobs wait for one build)."""
    if selection is None or selection.family is None:
        return DEFAULT_IMAGE
    fam = selection.family
    tag = family_image(fam)
    if tag:
        return tag
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{fam.tag_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tag = family_image(fam)
        if tag:
            return tag
        minutes = _build_module().estimate(fam)
        log = LOGS / f"{fam.tag_name}.log"
        say(f"building the torch {fam.name} image (≈ {minutes} min, once); log: {log}")
        _run_build(fam, log, say)
    tag = family_image(fam)
    if tag is None:
        raise BackendUnavailable(f"the torch {fam.name} image was built but its tag is missing; "
                                 f"see {LOGS / (fam.tag_name + '.log')}")
    return tag


__all__ = ["DEFAULT_IMAGE", "family_image", "image_for"]
