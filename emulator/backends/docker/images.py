"""Which docker image a job runs, and building a DLC image's stand-in on first use.

A job runs the emulator's image of its DLC (:attr:`emulator.job.request.JobRequest.dlc_image`:
the framework family, the instance type's CPU or GPU image, Hugging Face): tagged
``sagemaker-emulator:<image id>-<hash of its inputs>``, built by ``docker/build.py --image <id>``
the first time it is needed (progress lines and an estimate on the console, the full output in a
log file), then reused. No DLC named (``current``) runs ``sagemaker-emulator:latest``, the image of
:data:`emulator.job.dlc.CURRENT_IMAGE` that ``nox -s image`` builds and tags (so a job from an
installed emulator without the ``docker/`` folder or a docker CLI, e.g. in a CI container, runs it).
A DLC's image build runs this project's ``docker/build.py``: a source checkout's, or the copy an
installed wheel carries, laid out as a checkout in the cache folder (:mod:`.context`; the same
files, so the same tags). A user's own image (an ``image_uri`` that is no PyTorch DLC) runs as given.

:func:`planned` says which image a job runs without side effects (the launch spec and ``plan``
use it; an image not built yet is named by the tag it will get); :func:`ensure` builds it (the
docker backend's ``prepare``, before anything of the job exists). :func:`probe` reads once per
image id which torch, Python and toolkits an image really holds and its manifest (what its
site-packages provide; a helper container with no network; cached), so ``job.json`` reports them,
the launcher prediction follows the image's toolkit and the preflight knows the job's world.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import json
import os
import shutil
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
from ...job import dlc, frameworks
from .. import manifest
from . import context, engine
from . import reaper as helpers
from .names import DEFAULT_IMAGE

if TYPE_CHECKING:
    from ...job.request import JobRequest

LOGS = cache_dir("images")
#: Free disk a cold image build needs at docker's data root at its peak (the pip step's container
#: layer, its commit, which the legacy builder copies, then the final stage's copy of /opt/venv,
#: before the builder stage is removed). Measured here on 2026-12-06: the Hugging Face 4.56.2 image
#: (9.2 GB) took 24 GB at the peak, and with 22 GB free its build failed after minutes with "no space
#: left on device". Families whose torch brings nvidia-* wheels make 6.7 to 9.2 GB images; 1.12's
#: (CUDA inside its wheel) is 3.2 GB, so it is asked for proportionally less.
BUILD_PEAK_BYTES = {"nvidia": 25 * 10**9, "1.12": 10 * 10**9}
#: Lines of the build's output shown on the console (the rest goes to the log).
PROGRESS_PREFIXES = ("image:", "build-base: built", "build-base: debootstrap")


@functools.cache
def _build_script() -> Path:
    """The ``build.py`` this install runs (:func:`.context.build_script`)."""
    script = context.build_script()
    if script is None:
        raise BackendUnavailable(
            f"framework images are built by the project's docker/build.py, which this install lacks "
            f"(no source checkout, no copy at {context.PACKAGED}); reinstall the emulator from its "
            "wheel or sdist, or use framework_version='current'")
    return script


@functools.cache
def _build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_sm_emulator_docker_build", _build_script())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


#: The torch source chosen in this process, by (image id, the index setting): the CPU index's URL, or
#: None for PyPI's builds. Chosen once, so a job's plan, build and records ask docker which image is
#: built (up to four ``docker image inspect`` calls: two tags, each with its base) once, not per call;
#: the build a job starts makes the image of this choice, so it stays the built one.
_TORCH_SOURCE: dict[tuple[str, str | None], str | None] = {}


def install_set(image: dlc.Image) -> dlc.InstallSet:
    """What ``image``'s stand-in installs, its torch builds the CPU index's ``+cpu`` ones or PyPI's as
    ``docker/build.py`` chooses (:func:`emulator.backends.layers.torch_source`: an image of either
    already built wins without network; else one probe of the index), once per process
    (:data:`_TORCH_SOURCE`)."""
    key = (image.id, dlc.torch_index_setting(os.environ))
    if key not in _TORCH_SOURCE:
        chosen = _build_module().torch_source(lambda index: frameworks.install_set(image, torch_index=index))
        _TORCH_SOURCE[key] = chosen.torch_index
    return frameworks.install_set(image, torch_index=_TORCH_SOURCE[key])


def built_image(image: dlc.Image) -> str | None:
    """The tag of ``image``'s stand-in if it is built for the current inputs, else None."""
    tag = _build_module().image_tag(install_set(image))
    return tag if tag and _image_id(tag) else None


def _run_build(image: dlc.Image, log: Path, say: Callable[[str], None]) -> None:
    script = _build_script()
    # The torch source this process chose, so the build cannot choose another (a second probe).
    cmd = [sys.executable, str(script), "--image", image.id,
           "--torch-index", _build_module().torch_index_arg(install_set(image))]
    # Its own session: Ctrl-C or SIGTERM here stops the whole build (and its docker CLI calls).
    with log.open("w") as out, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL, cwd=script.parents[1], start_new_session=True) as proc:
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
        raise BackendUnavailable(f"building the image of {image.label} failed (exit {status}); "
                                 f"full log: {log}\n{tail}")


def build(image: dlc.Image, *, say: Callable[[str], None] = print) -> str:
    """The tag of ``image``'s stand-in, built first if needed (once, under a lock: parallel jobs
    wait for one build)."""
    tag = built_image(image)
    if tag:
        return tag
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{image.id}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tag = built_image(image)
        if tag:
            return tag
        require_disk(image, engine.data_root())
        minutes = _build_module().estimate(install_set(image))
        log = LOGS / f"{image.id}.log"
        say(f"building the image of {image.label} (≈ {minutes} min, once); log: {log}")
        _run_build(image, log, say)
    tag = built_image(image)
    if tag is None:
        raise BackendUnavailable(f"the image of {image.label} was built but its tag is missing; "
                                 f"see {LOGS / (image.id + '.log')}")
    return tag


def require_disk(image: dlc.Image, root: str | None) -> None:
    """Refuse a build of ``image`` that would not fit at docker's data root ``root``
    (:data:`BUILD_PEAK_BYTES`) before anything is downloaded, naming the numbers and how to make
    room. No check where that folder is not on this machine (None or missing: a remote engine, or a
    client in a container without it)."""
    if not root or not os.path.isdir(root):
        return
    need = BUILD_PEAK_BYTES["1.12" if image.family == "1.12" else "nvidia"]
    free = shutil.disk_usage(root).free
    if free < need:
        raise BackendUnavailable(
            f"building the image of {image.label} needs about {need / 1e9:.0f} GB free at docker's data root "
            f"{root} at its peak and {free / 1e9:.1f} GB are free, so nothing was built: make room "
            "(`python -m emulator cache` lists the emulator's images and layers; `python -m emulator cache prune "
            "--older-than 30d` or `--all` removes what no job uses), or run the job on the process backend")


@dataclass(frozen=True)
class JobImage:
    """The image every host of a job runs, as :func:`planned` finds it (reads only)."""

    tag: str  #: what the hosts run (an image not built yet: the tag it will get)
    dlc: dlc.Image | None  #: the DLC image it stands for (None: the user's own image)
    built: bool  #: False: :func:`ensure` still has to build it

    @property
    def own(self) -> bool:
        """The user's own image (``image_uri`` that is no PyTorch DLC): runs as given."""
        return self.dlc is None

    @property
    def pending(self) -> str | None:
        """What :func:`ensure` will do first, for ``plan`` (None: nothing)."""
        if self.built or self.dlc is None:
            return None
        minutes = _build_module().estimate(install_set(self.dlc))
        return (f"the image of {self.dlc.label} is built before the job starts (≈ {minutes} min, once); "
                "its tag and ENV are shown here once it is built")


def planned(request: JobRequest) -> JobImage:
    """The image ``request``'s hosts run: the user's own image as given; else the stand-in of the
    job's DLC image (:attr:`~emulator.job.request.JobRequest.dlc_image`). Reads only."""
    if request.image_uri and not frameworks.is_dlc_image(request.image_uri):
        return JobImage(request.image_uri, None, True)
    image = request.dlc_image
    selection = request.framework
    if selection is None or selection.family is None:  # no DLC named: the default image, as `nox -s image` tags it
        return JobImage(DEFAULT_IMAGE, image, True)
    tag = built_image(image)
    if tag is not None:
        return JobImage(tag, image, True)
    future = _build_module().image_tag(install_set(image))
    return JobImage(future or f"sagemaker-emulator:{image.id}-<inputs hash>", image, False)


def ensure(request: JobRequest, *, say: Callable[[str], None] = print) -> str:
    """The image ``request``'s hosts run (:func:`planned`), built first if needed."""
    image = planned(request)
    return image.tag if image.built or image.dlc is None else build(image.dlc, say=say)


# -- what an image holds -------------------------------------------------------------------------
PROBES = LOGS.parent / "probes"
#: Run by the image's own python3 (3.8 and later): its torch, Python and toolkits, and the top-level
#: modules of its manifest (an image docker/build.py made; None for another image).
PROBE = ("import json, platform\n"
         "from importlib import metadata\n"
         "def v(name):\n"
         "    try:\n"
         "        return metadata.version(name)\n"
         "    except metadata.PackageNotFoundError:\n"
         "        return None\n"
         "try:\n"
         f"    modules = json.load(open({manifest.IMAGE_PATH!r}))['modules']\n"
         "except (OSError, ValueError, KeyError):\n"
         "    modules = None\n"
         "print(json.dumps({'torch': v('torch'), 'python': platform.python_version(),\n"
         "                  'toolkit': [v('sagemaker-training'), v('sagemaker-pytorch-training')],\n"
         "                  'modules': modules}))\n")
PROBE_TIMEOUT = 120.0


@dataclass(frozen=True)
class ImageFacts:
    """Which torch, Python and toolkits an image holds (None: not there, or not known)."""

    torch: str | None
    python: str | None
    toolkit: tuple[str | None, str | None] | None
    #: Top-level modules the image's site-packages provide (its manifest); None: not known.
    modules: frozenset[str] | None = None

    @property
    def training_toolkit(self) -> str | None:
        """The ``sagemaker-training`` release (None: not in the image or not known)."""
        return self.toolkit[0] if self.toolkit else None


#: The label ``docker/build.py`` records where an image's torch builds came from in (a CPU index's
#: URL, or ``PyPI``; an image built before the label existed is PyPI's).
TORCH_INDEX_LABEL = "sagemaker-emulator.torch-index"


def torch_build(image: JobImage, found: ImageFacts | None) -> dict[str, object] | None:
    """``Emulator.Framework.TorchBuild`` of a built stand-in of a DLC (as the process backend's
    :func:`emulator.backends.layers.torch_build`): ``Source`` (:data:`TORCH_INDEX_LABEL`) and
    ``Builds`` (the torch the image holds, as :func:`probe` found it). None for a user's image, or
    before the image is built and probed. Reads only."""
    if image.dlc is None or not image.built or found is None or found.torch is None:
        return None
    try:
        labels = engine.client().images.get(image.tag).labels or {}
    except Exception:  # the engine went away, or the image did: prepare says what is wrong
        return None
    return {"Source": labels.get(TORCH_INDEX_LABEL, "PyPI"), "Builds": {"torch": found.torch}}


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
    modules = data.get("modules")
    return ImageFacts(data.get("torch"), data.get("python"), (kit[0], kit[1]) if kit else None,
                      frozenset(modules) if isinstance(modules, list) else None)


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
                               "toolkit": data.get("toolkit"), "modules": data.get("modules")}))
    tmp.replace(path)
    result = facts(image)
    assert result is not None
    return result


__all__ = ["DEFAULT_IMAGE", "TORCH_INDEX_LABEL", "ImageFacts", "JobImage", "build", "built_image", "ensure", "facts",
           "install_set", "planned", "probe", "torch_build"]
