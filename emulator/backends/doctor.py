"""``python -m emulator doctor``: which backends can run on this machine, and the fix where one cannot.

Each check is the probe a job's start uses, so ``doctor`` and ``--backend auto`` cannot disagree:

- **process**: :func:`emulator.backends.choose.probe_process` (the namespaces, done, not read off
  sysctls) and :func:`~emulator.backends.process_cause` for the fix;
- **docker**: :func:`emulator.backends.choose.engine` (the docker SDK's ping), then the default image
  (:func:`emulator.backends.docker.engine.image_id`), and whether this install can build a DLC
  image (the project's ``docker/`` folder, a source checkout);
- **mpi** (``pytorchddp``, ``smdistributed``, ``mpi`` on the process backend): Open MPI's
  ``mpirun``, ``ssh`` and ``ssh-keygen`` on this machine, and ``/usr/sbin/sshd`` (OpenSSH's as
  root, the stand-in mounted over it otherwise: :mod:`emulator.backends.process.sshd`); the
  docker images carry their own;
- **disk**: the free space under the cache folder against what one framework family's layers take.

``auto`` is then :func:`emulator.backends.decide` on the same probe and ping. Exit 0 when at
least one backend can run, 1 when none can. Nothing here is about SageMaker.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from ..cache import cache_dir
from ..console import paint
from ..errors import BackendUnavailable
from .choose import Probe, decide, engine, probe_process, process_cause
from .docker import context
from .docker.engine import image_id
from .docker.names import BUILD_SCRIPT, DEFAULT_IMAGE
from .layers import LAYER_BYTES
from .process.sshd import KEYGEN, SSHD

#: What one framework family's process-backend layers take at most (the check the layers' install
#: makes before a download), its torch from PyPI (the CPU index's builds take less; doctor does not
#: probe it); a docker image takes 3 to 7.3 GB more.
FAMILY_BYTES = LAYER_BYTES["base"] + LAYER_BYTES["image"]
#: The checks a job's start decides on (``mpi`` and ``disk`` only warn).
BACKEND_CHECKS = ("process", "docker")


@dataclass(frozen=True)
class Check:
    """One line of the report: ``ok``, what was found (``detail``) and, where not ok, ``fix``."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def mpi_missing() -> list[str]:
    """What an MPI-family job on the process backend needs from this machine and it lacks: the
    toolkit runs ``mpirun``, whose ``orted`` reach the hosts through ``ssh``; each host runs
    ``/usr/sbin/sshd`` (or the stand-in mounted over it) with keys made by ``ssh-keygen``."""
    missing = [f"{tool} ({package})" for tool, package in
               (("mpirun", "openmpi-bin"), ("ssh", "openssh-client"), (KEYGEN, "openssh-client"))
               if shutil.which(tool) is None]
    if not Path(SSHD).is_file():
        missing.append(f"{SSHD} (openssh-server)")
    return missing


def check_process(probe: Probe) -> Check:
    if probe.ok:
        return Check("process", True, probe.detail)
    return Check("process", False, probe.detail, process_cause(probe))


def check_docker(engine_ok: bool, engine_detail: str) -> Check:
    """The engine, then the default image (looked up as the docker backend's ``check`` does), and
    whether this install can build a DLC image."""
    if not engine_ok:
        return Check("docker", False, engine_detail, "start an engine, or set DOCKER_HOST to one that runs")
    builds = ("" if context.available() else
              f"; DLC images cannot be built from this install (no {BUILD_SCRIPT.parent}, no "
              f"{context.PACKAGED}): framework_version='current' only")
    try:
        image_id(DEFAULT_IMAGE)
    except BackendUnavailable as exc:
        return Check("docker", False, str(exc),
                     "`nox -s image` in a source checkout, or `docker load` the image built elsewhere")
    return Check("docker", True, f"the engine at {engine_detail} answers; {DEFAULT_IMAGE} is there{builds}")


def check_mpi() -> Check:
    missing = mpi_missing()
    if missing:
        return Check("mpi", False, f"missing {', '.join(missing)}",
                     "apt-get install openmpi-bin openssh-client openssh-server (or use --backend docker)")
    return Check("mpi", True, f"mpirun at {shutil.which('mpirun')}, ssh, ssh-keygen, {SSHD}")


def check_disk(folder: Path | None = None, need: int = FAMILY_BYTES) -> Check:
    """Free space where the framework layers go (the nearest folder of ``folder`` that exists)."""
    where = folder or cache_dir()
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        return Check("disk", False, f"cannot read the free space of {probe}: {exc}", "check the folder")
    detail = f"{free / 1e9:.1f} GB free at {where}; a framework family's layers take about {need / 1e9:.0f} GB"
    if free >= need:
        return Check("disk", True, detail)
    return Check("disk", False, detail, "free space, or point XDG_CACHE_HOME at a larger disk")


def auto_line(probe: Probe, engine_ok: bool, engine_detail: str) -> Check:
    """What ``--backend auto`` would pick, by :func:`emulator.backends.decide` itself."""
    try:
        choice = decide(probe, engine_ok, engine_detail)
    except BackendUnavailable as exc:
        return Check("auto", False, str(exc))
    return Check("auto", True, f"{choice.backend}: {choice.reason.removeprefix('auto: ')}")


def checks() -> list[Check]:
    """Every check, run now (the process probe uncached, the engine pinged)."""
    probe = probe_process()
    engine_ok, engine_detail = engine()
    return [check_process(probe), check_docker(engine_ok, engine_detail), check_mpi(), check_disk(),
            auto_line(probe, engine_ok, engine_detail)]


def exit_code(report: Sequence[Check]) -> int:
    """0 when at least one backend can run, else 1."""
    return 0 if any(c.ok for c in report if c.name in BACKEND_CHECKS) else 1


def render(report: Sequence[Check], stream: TextIO, width: int = 100) -> str:
    """One aligned row per check (ok/no coloured on a terminal; long findings wrapped under their
    column), then one fix line per failed check."""
    name_w = max(len(c.name) for c in report)
    lines = []
    for c in report:
        mark = paint("ok", "32", stream) if c.ok else paint("no", "31", stream)
        wrapped = textwrap.wrap(c.detail, max(40, width - name_w - 6), break_on_hyphens=False) or [""]
        lines.append(f"{c.name.ljust(name_w)}  {mark}  {wrapped[0]}")
        lines += [f"{'':{name_w}}      {more}" for more in wrapped[1:]]
    fixes = [f"  {c.name}: {c.fix}" for c in report if c.fix]
    return "\n".join(lines + (["fix:", *fixes] if fixes else []))


def main(argv: Sequence[str] = (), stream: TextIO = sys.stdout) -> int:
    """``doctor [--json]``: print the report; exit :func:`exit_code`."""
    report = checks()
    if "--json" in argv:
        json.dump([asdict(c) for c in report], stream, indent=2)
        stream.write("\n")
    else:
        stream.write(render(report, stream, shutil.get_terminal_size((100, 24)).columns) + "\n")
        if os.environ.get("XDG_CACHE_HOME"):
            stream.write(f"cache folder: {cache_dir()} (XDG_CACHE_HOME)\n")
    return exit_code(report)
