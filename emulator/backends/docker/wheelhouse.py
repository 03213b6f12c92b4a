"""``requirements.txt`` on the docker backend: a wheelhouse resolved on this machine.

On SageMaker the toolkit runs ``python -m pip install -r requirements.txt`` in every container,
and pip downloads from PyPI. Emulated hosts have no egress, so before the job starts the emulator
resolves the requirements *here*, in a short-lived helper container of the job's own image on
docker's default network (``resolver.py``: the image's pip runs ``install --dry-run
--report``, then downloads what the image lacks). The wheelhouse folder is cached by
(requirements, image id) and mounted read-only into every host with a pip configuration file at
``/etc/pip.conf`` (``no-index``, ``find-links``): pip's global configuration, so the script's
environment gets no ``PIP_*`` variable it would not have on SageMaker. The toolkit's own install
step then runs unchanged and offline.

What is emulated: which distributions pip installs (the image's own pip, Python, environment
markers and wheel tags; what the image has and satisfies stays, as pip's only-if-needed strategy
does), sdists built in the host (``setuptools``/``wheel`` are added for pip's build isolation),
and the failure: a requirement that cannot be resolved leaves the wheelhouse without it, so the
hosts' pip fails and the toolkit reports ``InstallRequirementsError`` as on SageMaker.

Not emulated: pip's download messages (``Processing /opt/sm-emulator/wheelhouse/…`` instead of
``Downloading …``); VCS and URL requirements (unreachable from hosts, as from any emulated host);
hosts see ``/etc/pip.conf`` and the mounted folder. Why not ``pip download --python-version``
here: pip evaluates environment markers with the running interpreter (measured: for Python 3.9
it picks urllib3 2.x although botocore asks ``urllib3<1.27; python_version < "3.10"``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...cache import cache_dir
from ...inhost.protocol import CODE_DIR
from ..base import Mount
from . import engine, files
from . import reaper as helpers

CACHE = cache_dir("wheelhouse")
#: Where hosts see the wheelhouse and the pip configuration that points at it.
HOST_WHEELHOUSE = "/opt/sm-emulator/wheelhouse"
HOST_PIP_CONF = "/etc/pip.conf"
RESOLVER = Path(__file__).with_name("resolver.py")
RESOLVE_TIMEOUT = 1800.0
#: This machine's CA bundle, given to the helper's pip (a TLS-inspecting proxy's CA may be in it).
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class Wheelhouse:
    """A prepared wheelhouse: ``folder`` holds ``wheels/``, ``pip.conf`` and ``pip.log``."""

    folder: Path
    key: str
    resolved: bool  #: False: pip could not resolve; the hosts' pip will fail the same way
    error: str  #: pip's last lines when not resolved
    files: tuple[str, ...]  #: what was downloaded (the image has the rest)

    def mounts(self) -> dict[str, Path]:
        """Read-only bind mounts every host needs: container path -> path on this machine."""
        return {HOST_WHEELHOUSE: self.folder / "wheels", HOST_PIP_CONF: self.folder / "pip.conf"}

    @property
    def log(self) -> Path:
        """pip's output of the resolution (for the job's log)."""
        return self.folder / "pip.log"


def pip_conf() -> str:
    """The hosts' ``/etc/pip.conf``: only the wheelhouse, never an index."""
    return f"[global]\nno-index = true\nfind-links = {HOST_WHEELHOUSE}\n"


def cache_key(requirements: str, image_id: str) -> str:
    h = hashlib.sha256()
    for part in (requirements, image_id, pip_conf(), RESOLVER.read_text()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def image_id(image: str) -> str:
    """``image``'s id on the engine (the docker SDK; an error naming the engine when it is not there)."""
    return engine.image_id(image)


def _resolve(requirements: Path, image: str, out: Path, name: str) -> None:
    """Run the resolver in a helper container of ``image`` through the docker SDK (removed
    whatever happens; labelled for ``python -m emulator reap``, see :mod:`emulator.backends.docker.reaper`).
    Its folders are bind mounts when the engine sees this machine's paths (the backend's sentinel
    check), else they are copied in and the result out through the engine's API."""
    mounts = [Mount(requirements.parent, CODE_DIR, read_only=True), Mount(out, "/out", read_only=False),
              Mount(RESOLVER, "/tmp/sm-emulator-resolver.py", read_only=True)]
    environment = {}
    if CA_BUNDLE.is_file():
        mounts.append(Mount(CA_BUNDLE, "/tmp/sm-emulator-ca.crt", read_only=True))
        environment["PIP_CERT"] = "/tmp/sm-emulator-ca.crt"
    labels = helpers.labels("wheelhouse")
    mode, _ = files.choose_mode(engine.client(), image, mounts, labels)
    copy = mode == files.COPY
    volumes = {} if copy else {str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
                               for m in mounts}
    status, stdout, stderr = engine.run_helper(
        image, ["/tmp/sm-emulator-resolver.py", f"{CODE_DIR}/{requirements.name}", "/out",
                str(os.getuid()), str(os.getgid())],
        name=name, labels=labels, entrypoint="python", network="bridge",
        volumes=volumes, environment=environment, timeout=RESOLVE_TIMEOUT,
        before_start=(lambda c: files.put_inputs(c, mounts)) if copy else None,
        after_end=(lambda c: files.get_outputs(c, mounts)) if copy else None)
    if not (out / "result.json").is_file():
        why = "timed out" if status is None else (stderr or stdout).strip()[-2000:]
        (out / "result.json").write_text(json.dumps(
            {"resolved": False, "error": f"the wheelhouse helper container failed: {why}",
             "files": []}))


def _file(requirements: Path) -> Path:
    """A requirements file, or a source dir's ``requirements.txt``."""
    return requirements / "requirements.txt" if requirements.is_dir() else requirements


def _stored(folder: Path, key: str) -> Wheelhouse:
    data = json.loads((folder / "result.json").read_text())
    return Wheelhouse(folder, key, bool(data["resolved"]), data["error"], tuple(data["files"]))


def lookup(requirements: Path, image: str, *, cache: Path = CACHE) -> Wheelhouse | None:
    """The wheelhouse :func:`prepare` made for ``requirements`` in ``image``, or None when there
    is none yet. Reads only (the launch spec uses it)."""
    key = cache_key(_file(requirements).read_text(), image_id(image))
    return _stored(cache / key, key) if (cache / key / "result.json").is_file() else None


def prepare(requirements: Path, image: str, *, cache: Path = CACHE) -> Wheelhouse:
    """The wheelhouse for ``requirements`` (a file, or a source dir's ``requirements.txt``) in
    ``image``; resolved once per (requirements, image id) under a file lock, then reused (a failed
    resolution is retried). Never raises for requirements pip cannot resolve: the result says so,
    and the hosts' own pip reports it."""
    requirements = _file(requirements)
    text = requirements.read_text()
    key = cache_key(text, image_id(image))
    folder = cache / key
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # A failed resolution is tried again (it may have been the network); a success is kept.
        if not (folder / "result.json").is_file() or \
                not json.loads((folder / "result.json").read_text())["resolved"]:
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
            try:
                (tmp / "wheels").mkdir()
                name = f"sm-emulator-wheelhouse-{key}-{os.getpid()}"
                _resolve(requirements.resolve(), image, tmp, name)
                (tmp / "pip.conf").write_text(pip_conf())
                shutil.rmtree(folder, ignore_errors=True)
                tmp.rename(folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return _stored(folder, key)


def modules(house: Wheelhouse) -> frozenset[str]:
    """Top-level modules of what the hosts' pip installs from ``house``: each wheel's, read from its
    ``RECORD`` (:func:`emulator.backends.manifest.top_levels`); an sdist (built in the host) counts
    for its distribution's name (``-`` → ``_``)."""
    import re

    from .. import manifest

    out: set[str] = set()
    for path in sorted((house.folder / "wheels").iterdir()) if (house.folder / "wheels").is_dir() else []:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as whl:
                dist = _WheelDistribution(whl)
                out |= manifest.top_levels(dist)
        else:
            match = re.match(r"(.+?)-\d", path.name)
            if match:
                out.add(manifest.canonical_name(match.group(1)).replace("-", "_"))
    return frozenset(out)


class _WheelDistribution:
    """The part of ``importlib.metadata.Distribution`` :func:`~emulator.backends.manifest.top_levels`
    reads, for a wheel file."""

    def __init__(self, whl: zipfile.ZipFile) -> None:
        self._whl = whl
        self._info = next((n.split("/")[0] for n in whl.namelist() if n.split("/")[0].endswith(".dist-info")), "")

    @property
    def files(self) -> list[str]:
        record = self.read_text("RECORD") or ""
        return [line.split(",")[0] for line in record.splitlines() if line.strip()]

    def read_text(self, name: str) -> str | None:
        try:
            return self._whl.read(f"{self._info}/{name}").decode(errors="replace")
        except KeyError:
            return None


__all__ = ["HOST_PIP_CONF", "HOST_WHEELHOUSE", "Wheelhouse", "lookup", "modules", "pip_conf", "prepare"]
