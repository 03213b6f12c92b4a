"""Which docker image a job runs, and building a framework family's image on first use.

No ``framework_version`` (or ``"current"``) runs the default image, ``sagemaker-emulator:latest``,
exactly as before. A framework family (:mod:`emulator.job.frameworks`) runs
``sagemaker-emulator:torch<family>-<hash of its inputs>``, built by ``docker/build.py
--framework <family>`` the first time it is needed (progress lines and an estimate on the
console, the full output in a log file), then reused; ``nox -s image -- --framework 1.12`` builds
it ahead. The build needs this project's ``docker/`` folder (a source checkout).

:func:`planned` says which image a job runs without side effects (the launch spec and ``plan``
use it; a family image not built yet is named by the tag it will get); :func:`ensure` builds it
(the docker backend's ``prepare``, before anything of the job exists). A user's own image (an
``image_uri`` that is no PyTorch DLC) runs as given. :func:`probe` reads once per image id which
torch, Python and toolkits an image really holds (a helper container with no network; cached), so
``job.json`` reports them and the launcher prediction follows the image's toolkit.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ...cache import cache_dir
from ...errors import BackendUnavailable
from ...job import frameworks
from ...job.frameworks import Family, Selection
from . import engine
from . import reaper as helpers
from .names import DEFAULT_IMAGE

if TYPE_CHECKING:
    from ...job.request import JobRequest

BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "build.py"
LOGS = cache_dir("images")
#: Lines of the build's output shown on the console (the rest goes to the log).
PROGRESS_PREFIXES = ("image:", "build-base: built", "build-base: debootstrap")


@functools.cache
def _build_module() -> ModuleType:
    if not BUILD_SCRIPT.is_file():
        raise BackendUnavailable(
            f"framework images are built from the project's docker/ folder, not found at "
            f"{BUILD_SCRIPT.parent}; use a source checkout, or framework_version='current'")
    spec = importlib.util.spec_from_file_location("_sm_emulator_docker_build", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def family_image(fam: Family) -> str | None:
    """The tag of ``fam``'s image if it is built for the current inputs, else None."""
    build = _build_module()
    tag = build.family_tag(fam)
    return tag if tag and _image_id(tag) else None


def _run_build(fam: Family, log: Path, say: Callable[[str], None]) -> None:
    cmd = [sys.executable, str(BUILD_SCRIPT), "--framework", fam.name]
    # Its own session: Ctrl-C or SIGTERM here stops the whole build (and its docker CLI calls).
    with log.open("w") as out, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL, cwd=BUILD_SCRIPT.parents[1], start_new_session=True) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                if line.startswith(PROGRESS_PREFIXES):
                    say(line.rstrip())
        except BaseException:
            os.killpg(proc.pid, signal.SIGTERM)
            raise
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


@dataclass(frozen=True)
class JobImage:
    """The image every host of a job runs, as :func:`planned` finds it (reads only)."""

    tag: str  #: what the hosts run (a family image not built yet: the tag it will get)
    family: Family | None  #: the DLC family it stands for (None: the default or the user's image)
    own: bool  #: the user's own image (``image_uri`` that is no PyTorch DLC): runs as given
    built: bool  #: False: a family image :func:`ensure` still has to build

    @property
    def pending(self) -> str | None:
        """What :func:`ensure` will do first, for ``plan`` (None: nothing)."""
        if self.built or self.family is None:
            return None
        minutes = _build_module().estimate(self.family)
        return (f"the torch {self.family.name} image is built before the job starts (≈ {minutes} "
                f"min, once); its tag and ENV are shown here once it is built")


def planned(request: JobRequest) -> JobImage:
    """The image ``request``'s hosts run: the user's own image as given; for a PyTorch DLC URI or
    a ``framework_version``, that family's image; else (nothing asked, ``current``, a DLC URI
    without a version) the default image. Reads only."""
    if request.image_uri and not frameworks.is_dlc_image(request.image_uri):
        return JobImage(request.image_uri, None, True, True)
    selection = request.framework
    if selection is None or selection.family is None:
        return JobImage(DEFAULT_IMAGE, None, False, True)
    fam = selection.family
    tag = family_image(fam)
    if tag is not None:
        return JobImage(tag, fam, False, True)
    future = _build_module().family_tag(fam)
    return JobImage(future or f"sagemaker-emulator:{fam.tag_name}-<inputs hash>", fam, False, False)


def ensure(request: JobRequest, *, say: Callable[[str], None] = print) -> str:
    """The image ``request``'s hosts run (:func:`planned`), built first if it is a family image
    that is not built yet."""
    image = planned(request)
    return image.tag if image.built else image_for(request.framework, say=say)


# -- what an image holds -------------------------------------------------------------------------
PROBES = LOGS.parent / "probes"
#: Run by the image's own python3 (3.8 and later): its torch, Python and toolkits.
PROBE = ("import json, platform\n"
         "from importlib import metadata\n"
         "def v(name):\n"
         "    try:\n"
         "        return metadata.version(name)\n"
         "    except metadata.PackageNotFoundError:\n"
         "        return None\n"
         "print(json.dumps({'torch': v('torch'), 'python': platform.python_version(),\n"
         "                  'toolkit': [v('sagemaker-training'), v('sagemaker-pytorch-training')]}))\n")
PROBE_TIMEOUT = 120.0


@dataclass(frozen=True)
class ImageFacts:
    """Which torch, Python and toolkits an image holds (None: not there, or not known)."""

    torch: str | None
    python: str | None
    toolkit: tuple[str | None, str | None] | None

    @property
    def training_toolkit(self) -> str | None:
        """The ``sagemaker-training`` release (None: not in the image or not known)."""
        return self.toolkit[0] if self.toolkit else None


def _image_id(image: str) -> str | None:
    """``image``'s id on the engine (docker SDK), or None when it is not there."""
    try:
        return engine.image_id(image)
    except BackendUnavailable:  # reads only; prepare's engine.image_id says what is wrong
        return None


def facts(image: str) -> ImageFacts | None:
    """What :func:`probe` found in ``image`` (this image id), or None when it was not probed.
    Reads only."""
    image_id = _image_id(image)
    path = PROBES / f"{(image_id or '').replace(':', '-')}.json"
    if image_id is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    kit = data.get("toolkit")
    return ImageFacts(data.get("torch"), data.get("python"), (kit[0], kit[1]) if kit else None)


def probe(image: str) -> ImageFacts:
    """Read ``image``'s torch, Python and toolkits once per image id, in a helper container with
    no network (labelled for ``reap``, removed at once); cached. An image without ``python3``
    holds nothing known."""
    known = facts(image)
    if known is not None:
        return known
    image_id = engine.image_id(image)  # not there: BackendUnavailable naming the engine and the fix
    name = f"sm-emulator-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    status, stdout, _ = engine.run_helper(image, ["-c", PROBE], name=name, labels=helpers.labels("probe"),
                                          entrypoint="python3", network="none", timeout=PROBE_TIMEOUT)
    try:
        data = json.loads(stdout.strip().splitlines()[-1]) if status == 0 else {}
    except (ValueError, IndexError):
        data = {}
    PROBES.mkdir(parents=True, exist_ok=True)
    path = PROBES / f"{image_id.replace(':', '-')}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"image": image, "torch": data.get("torch"), "python": data.get("python"),
                               "toolkit": data.get("toolkit")}))
    tmp.replace(path)
    result = facts(image)
    assert result is not None
    return result


__all__ = ["DEFAULT_IMAGE", "ImageFacts", "JobImage", "ensure", "facts", "family_image", "image_for",
           "planned", "probe"]
