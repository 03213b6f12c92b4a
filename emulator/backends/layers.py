"""Framework layers (process backend): a DLC image's packages, installed once per machine.

A process-backend job runs in a job environment (:mod:`emulator.backends.jobenv`): a venv that
sees, after its own site-packages (what the job's ``requirements.txt`` installs), the *layers* of
its DLC image (:func:`emulator.job.dlc.install_set`), in this order:

1. the image layer, ``frameworks/<key>``: every other package of the image that installs here
   (pandas, scikit-learn, opencv, the toolkits, pip, ... ; Hugging Face: transformers, datasets,
   ...), resolved by pip in a venv that sees the base layer (so it installs only what is missing,
   as AWS's successive ``pip install`` lines do), ``--uploaded-prior-to`` the image's date; a
   Hugging Face image's in AWS's order, one pip run per step (:attr:`~emulator.job.dlc.InstallSet.steps`);
2. the base layer, ``frameworks/<key>``: the family's torch, torchvision and torchaudio and what they
   need, shared by every image of the family (CPU, GPU, Hugging Face): the ``+cpu`` builds from the
   PyTorch CPU index where it is reachable when the layer is made (under 1 GB), else PyPI's CUDA
   builds with their ``nvidia-*`` wheels (4 to 5.5 GB); see :func:`torch_source`.

Each layer is a ``site-packages`` folder added with ``site.addsitedir`` (its ``.pth`` files run, as
in an image's site-packages), made under a file lock into ``<key>.part`` and renamed when complete
(``.ready``), keyed by what it installs, this Python release and machine, and never modified
afterwards: pip in a job environment cannot uninstall from it (it is outside the environment), so a
requirement that replaces a DLC package shadows it instead. Each layer keeps a manifest
(:data:`MANIFEST`, :mod:`emulator.backends.manifest`): the distributions it holds and their
top-level modules, read from the installed files, which the preflight uses.

pip's configuration: the layers' pip reads the index (``index-url``), certificate, proxy and
timeouts of this machine's pip configuration, but not ``find-links`` or extra indexes: pip's
``--uploaded-prior-to`` needs upload times, which local folders and most extra indexes do not give,
so their newer files would leak into an image dated before them.

Where the torch builds come from (:func:`torch_source`): the layer key records the source that was
used (the CPU index's URL, or nothing for PyPI: the keys of layers made from PyPI are what they were
before the CPU index was tried). A job first looks for a torch layer already made from either
source, without any network; only when there is none does it probe the CPU index (one GET of
``<index>/torch/``, :data:`PROBE_TIMEOUT`), once per process, and make the layer from the index it
answered for, else from PyPI. The CPU index is a PEP 503 HTML index without upload times, which
pip's ``--uploaded-prior-to`` refuses, so its builds are resolved and downloaded without a date (each
is an exact version) and installed from that folder with what they need from PyPI, dated
(:func:`_install_from_index`). Not emulated: AWS's GPU images' own ``+cu1xx`` builds (CUDA: a GPU
image's job gets the ``+cpu`` build, recorded as a deviation, :func:`emulator.job.dlc.torch_deviation`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

from ..cache import cache_dir
from ..errors import BackendUnavailable
from ..job import dlc
from ..job.dlc import InstallSet
from . import manifest

LAYERS = cache_dir("frameworks")
#: Changes when what a layer holds changes.
LAYOUT = "2"
#: A layer's record of what it holds.
MANIFEST = "manifest.json"
#: How long installing one layer may take (a CUDA torch is GBs).
INSTALL_TIMEOUT = 3600
#: Keys of this machine's pip configuration the layers' pip keeps (see the module docstring).
KEPT_PIP_CONFIG = ("index-url", "cert", "client-cert", "proxy", "trusted-host", "timeout", "retries")
#: Disk a layer takes once made, for the check before one is made (measured, docs/guides/frameworks.md,
#: "The DLC's packages": a family's torch from PyPI with its nvidia-* wheels 5.0 GB for 2.13, 5.5 GB for 2.5;
#: torch 2.13.0+cpu alone 0.76 GB installed, so a ``+cpu`` base layer with numpy, sympy, ... about
#: 1 GB; an image layer 1.6 to 1.8 GB, a Hugging Face one 2.1 GB), with room for pip's unpacking.
#: ``base-none``: a set without torch builds (a stand-in image) makes an empty base layer.
LAYER_BYTES = {"base": 6_000_000_000, "base-cpu": 1_500_000_000, "base-none": 0, "image": 2_500_000_000}
#: How long the probe of the CPU index waits (to connect, and for each read) before PyPI is used.
PROBE_TIMEOUT = 5.0
#: pip's default index (where the layers' pip configuration names none).
PYPI = "https://pypi.org/simple"
#: Environment variables of pip's that would bring in files without upload times (dropped).
DROPPED_PIP_VARS = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT", "PIP_REQUIREMENT",
                    "PIP_CONFIG_FILE", "PIP_TARGET", "PIP_PREFIX", "PIP_USER")


@dataclass(frozen=True)
class Layer:
    """One layer: where it is and what it holds once made."""

    path: Path
    what: str  #: for people: "torch 2.5.1 (PyPI's CUDA build)", "the PyTorch 2.5.1 GPU DLC's packages"

    @property
    def ready(self) -> bool:
        return (self.path / ".ready").is_file()

    def manifest(self) -> dict[str, object]:
        """The layer's manifest (empty before it is made)."""
        try:
            data: dict[str, object] = json.loads((self.path / MANIFEST).read_text())
            return data
        except (OSError, ValueError):
            return {}

    def distributions(self) -> dict[str, str]:
        """``{canonical name: version}`` of what the layer holds (empty before it is made)."""
        found = self.manifest().get("distributions", {})
        return dict(found) if isinstance(found, dict) else {}

    def modules(self) -> set[str]:
        """Top-level modules the layer provides (empty before it is made)."""
        found = self.manifest().get("modules", [])
        return set(found) if isinstance(found, list) else set()


def _python_tag() -> str:
    return f"{sys.implementation.name}{sys.version_info[0]}.{sys.version_info[1]}-{platform.machine()}"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join([LAYOUT, _python_tag(), *parts]).encode()).hexdigest()[:16]


def base_layer(install: InstallSet) -> Layer:
    """The layer holding ``install``'s torch builds (shared by the family's images)."""
    key = _key("base", *install.torch, "\0", *install.torch_constraints, install.torch_uploaded_prior_to or "",
               install.torch_index or "")
    build = f"the +cpu builds from {install.torch_index}" if install.torch_index else "PyPI's CUDA builds"
    return Layer(LAYERS / key, f"{', '.join(install.torch)} ({build})")


def base_kind(install: InstallSet) -> str:
    """The :data:`LAYER_BYTES` key of ``install``'s base layer: its size depends on its source."""
    if not install.torch:
        return "base-none"
    return "base-cpu" if install.torch_index else "base"


def image_layer(install: InstallSet) -> Layer:
    """The layer holding the rest of ``install`` (above :func:`base_layer`)."""
    key = _key("image", base_layer(install).path.name, *install.key_material())
    return Layer(LAYERS / key, f"the packages of {install.image.label}")


def layers(install: InstallSet) -> list[Layer]:
    """The layers a job environment of ``install`` sees, in ``sys.path`` order."""
    return [image_layer(install), base_layer(install)]


# -- where the torch builds come from ----------------------------------------------------------------
#: What :func:`probe` answered in this process, by (index, torch version): one probe per layer build.
_PROBED: dict[tuple[str, str], bool] = {}


def torch_source(of: Callable[[str | None], InstallSet], env: Mapping[str, str] | None = None, *,
                 made: Callable[[InstallSet], bool] | None = None) -> InstallSet:
    """The install set a job uses, of ``of(index)`` (the job's install set with its torch from the CPU
    ``index``, or from PyPI for None) (module docstring):

    1. :data:`~emulator.job.dlc.TORCH_INDEX_VAR` of ``env`` (default this process's) is ``pypi``:
       PyPI's, no probe;
    2. one already ``made`` (default: its torch layer is ready; the docker backend passes "its
       image is built"): the CPU index's, else PyPI's — found on disk, no network;
    3. none yet: the CPU index's where :func:`probe` finds its torch build there (probed once per
       process), else PyPI's."""
    environ = os.environ if env is None else env
    index = dlc.torch_index_setting(environ)
    pypi = of(None)
    if index is None or not pypi.torch:
        return pypi
    cpu = of(index)
    for candidate in (cpu, pypi):
        if made(candidate) if made is not None else base_layer(candidate).ready:
            return candidate
    want = next((r.split("==", 1)[1] for r in cpu.torch if r.startswith("torch==")), "")
    if (index, want) not in _PROBED:
        _PROBED[(index, want)] = probe(index, want or None, env=pip_environment(environ))
    return cpu if _PROBED[(index, want)] else pypi


def torch_build(install: InstallSet) -> dict[str, object] | None:
    """``job.json``'s ``Emulator.Framework.TorchBuild``, from ``install``'s base layer's own record:
    ``Source`` (the CPU index its torch came from, or ``PyPI``) and ``Builds`` (the versions it holds);
    None before the layer is made. A layer made before the record existed is PyPI's (its key says so)."""
    base = base_layer(install)
    if not base.ready:
        return None
    held = base.distributions()
    index = base.manifest().get("torch_index", install.torch_index)
    return {"Source": index or "PyPI", "Builds": {name: held[name] for name in dlc.TORCH_TRIO if name in held}}


def probe(index: str, torch: str | None = None, *, env: Mapping[str, str] | None = None,
          timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the PEP 503 index ``index`` answers a GET of ``<index>/torch/`` with 200 within
    ``timeout`` and, for a ``torch`` version (``2.13.0+cpu``), lists a file of it (``torch-2.13.0+cpu-…``,
    percent-decoded). pip's proxy and certificate in ``env`` (``PIP_PROXY``, ``PIP_CERT``: what
    :func:`pip_environment` gives) are used, else the standard library's (``https_proxy``, the system's
    CAs). Any failure (name resolution, a refused connection, a timeout, TLS, an HTTP error) is False.
    Not emulated: pip's ``trusted-host``, client certificates and keyring credentials."""
    env = env or {}
    handlers: list[urllib.request.BaseHandler] = []
    if env.get("PIP_PROXY"):
        handlers.append(urllib.request.ProxyHandler({"http": env["PIP_PROXY"], "https": env["PIP_PROXY"]}))
    try:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=env.get("PIP_CERT")
                                                                                       or None)))
        request = urllib.request.Request(index.rstrip("/") + "/torch/", headers={"Accept": "text/html"})
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as answer:
            if answer.status != 200:
                return False
            page = answer.read().decode("utf-8", "replace")
    except (OSError, ValueError, HTTPException):
        return False
    return torch is None or f"torch-{torch}-" in urllib.parse.unquote(page)


# -- pip -------------------------------------------------------------------------------------------
def pip_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment the layers' pip runs with (module docstring): ``env`` (default this
    process's) without pip's find-links/extra-index variables and configuration files, plus the
    kept keys of this machine's pip configuration as ``PIP_*`` variables (unless ``env`` sets them)."""
    base = dict(os.environ if env is None else env)
    config = _pip_config(base)
    out = {k: v for k, v in base.items() if k not in DROPPED_PIP_VARS}
    out["PIP_CONFIG_FILE"] = os.devnull
    for key, value in config.items():
        out.setdefault(f"PIP_{key.upper().replace('-', '_')}", value)
    out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return out


def _pip_config(env: Mapping[str, str]) -> dict[str, str]:
    """The kept keys (:data:`KEPT_PIP_CONFIG`) of this machine's pip configuration files."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                              timeout=60, check=False, env={k: v for k, v in env.items() if not k.startswith("PIP_")})
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.partition(".")
        if key in KEPT_PIP_CONFIG and section in ("global", "install") and value:
            out[key] = value.strip().strip("'\"")
    return out


def _run_pip(args: Sequence[str], log: Path, env: Mapping[str, str], *, python: str | None = None,
             verb: str = "install") -> int:
    cmd = [sys.executable, "-m", "pip", *(["--python", python] if python else []), verb, "--no-input", *args]
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(env), timeout=INSTALL_TIMEOUT,
                                  check=False, stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            out.write(f"[emulator] pip did not finish in {INSTALL_TIMEOUT} s\n".encode())
            return 1


#: The first pip with ``--uploaded-prior-to``.
PIP_NEEDED = (26, 0)


def _require_pip() -> None:
    """BackendUnavailable, naming the fix, when this interpreter's pip lacks ``--uploaded-prior-to``."""
    from importlib import metadata

    try:
        version = metadata.version("pip")
    except metadata.PackageNotFoundError:
        version = "none"
    found = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    if found < PIP_NEEDED:
        raise BackendUnavailable(
            f"installing a DLC's packages needs pip {PIP_NEEDED[0]} or newer in the emulator's Python "
            f"({sys.executable}; it has pip {version}): pip's --uploaded-prior-to resolves what AWS left unpinned "
            f"as of the DLC's build. Run: {sys.executable} -m pip install -U 'pip>={PIP_NEEDED[0]}'")


def _date_args(date: str | None) -> list[str]:
    return ["--uploaded-prior-to", date] if date else []


# -- making layers ---------------------------------------------------------------------------------
def ensure(install: InstallSet, log: Path, *, env: Mapping[str, str] | None = None) -> list[Layer]:
    """Make ``install``'s layers where they are missing (pip's output to ``log``); return them in
    ``sys.path`` order. Raises :class:`~emulator.errors.BackendUnavailable` naming the layer and
    ``log`` when pip fails."""
    base, top = base_layer(install), image_layer(install)
    if base.ready and top.ready:  # nothing to install: no pip (reading its configuration starts a Python)
        return [top, base]
    pip_env = pip_environment(env)
    _require_disk([(layer, kind) for layer, kind in ((base, base_kind(install)), (top, "image")) if not layer.ready])
    _require_pip()
    _make(base, log, lambda part: _install_base(install, part, log, pip_env),
          record={"torch_index": install.torch_index})
    _make(top, log, lambda part: _install_image(install, base, part, log, pip_env))
    return [top, base]


def _require_disk(missing: Sequence[tuple[Layer, str]]) -> None:
    """Refuse before any download when the layers still to make (with their kind, a key of
    :data:`LAYER_BYTES`) would not fit on the disk of :data:`LAYERS`, naming the numbers and how to
    make room."""
    if not missing:
        return
    LAYERS.mkdir(parents=True, exist_ok=True)
    need = sum(LAYER_BYTES[kind] for _, kind in missing)
    free = shutil.disk_usage(LAYERS).free
    if free < need:
        raise BackendUnavailable(
            f"the framework layers of this job ({'; '.join(layer.what for layer, _ in missing)}) need about "
            f"{need / 1e9:.1f} GB at {LAYERS} and {free / 1e9:.1f} GB are free, so nothing was downloaded: "
            "make room (`python -m emulator cache` lists what the emulator keeps; `python -m emulator cache prune "
            "--older-than 30d` or `--all` removes what no job uses), or set XDG_CACHE_HOME to a larger disk")


def _make(layer: Layer, log: Path, install: object, *, record: Mapping[str, object] | None = None) -> None:
    """Make ``layer`` with ``install`` (a callable of its ``.part`` folder) unless it is ready;
    ``record`` is added to its manifest (the base layer's: where its torch came from)."""
    LAYERS.mkdir(parents=True, exist_ok=True)
    part = layer.path.with_name(layer.path.name + ".part")
    with open(layer.path.with_name(layer.path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if layer.ready:
            return
        shutil.rmtree(part, ignore_errors=True)
        shutil.rmtree(layer.path, ignore_errors=True)
        if not install(part):  # type: ignore[operator]
            shutil.rmtree(part, ignore_errors=True)
            raise BackendUnavailable(f"could not install {layer.what} into a framework layer (the DLC has them); "
                                     f"pip's output: {log}")
        write_manifest(part, record)
        (part / ".ready").touch()
        part.rename(layer.path)


def _install_base(install: InstallSet, part: Path, log: Path, env: Mapping[str, str]) -> bool:
    """The torch builds of ``install`` and what they need into ``part``: from its CPU index
    (:func:`_install_from_index`) or from PyPI (this machine's index), as of the family's date."""
    if not install.torch:  # an image without torch builds (none of AWS's): an empty layer
        part.mkdir(parents=True)
        return True
    constraints = _constraints_file(part.with_name(part.name + ".constraints"), install.torch_constraints)
    try:
        if install.torch_index:
            return _install_from_index(install, install.torch_index, part, log, env, constraints)
        return _run_pip(["--target", str(part), *_date_args(install.torch_uploaded_prior_to),
                         "-c", str(constraints), *install.torch], log, env) == 0
    finally:
        constraints.unlink(missing_ok=True)


def _install_from_index(install: InstallSet, index: str, part: Path, log: Path, env: Mapping[str, str],
                        constraints: Path) -> bool:
    """The ``+cpu`` builds from ``index``, what they need from PyPI (``PIP_INDEX_URL`` of ``env``)
    as of the family's date. pip's ``--uploaded-prior-to`` refuses an index without upload times, and
    a PEP 503 HTML page has none, so: resolve the builds with both indexes and no date (pip's
    ``--dry-run --report``: a name AWS left unpinned gets the build torch's pin allows), download
    exactly those from ``index``, then install them from that folder (pip checks no date on local
    files) with their requirements from PyPI, dated. An ``http://`` index is also a ``--trusted-host``
    (pip ignores plain-HTTP indexes but localhost's otherwise, while :func:`probe` found it answering)."""
    wheels, report = part.with_name(part.name + ".wheels"), part.with_name(part.name + ".report.json")
    trust = ["--trusted-host", urllib.parse.urlsplit(index).hostname or ""] if index.startswith("http://") else []
    shutil.rmtree(wheels, ignore_errors=True)
    try:
        if _run_pip(["--dry-run", "--ignore-installed", "--report", str(report), "--index-url", index, *trust,
                     "--extra-index-url", env.get("PIP_INDEX_URL", PYPI), "-c", str(constraints), *install.torch],
                    log, env) != 0:
            return False
        pins = _resolved(report, dlc.TORCH_TRIO)
        if _run_pip(["--no-deps", "--dest", str(wheels), "--index-url", index, *trust, *pins], log, env,
                    verb="download") != 0:
            return False
        return _run_pip(["--target", str(part), *_date_args(install.torch_uploaded_prior_to), "--find-links",
                         str(wheels), "-c", str(constraints), *pins], log, env) == 0
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
        report.unlink(missing_ok=True)


def _resolved(report: Path, names: Sequence[str]) -> list[str]:
    """``name==version`` of each of ``names`` in pip's installation report (``--report``)."""
    items = json.loads(report.read_text()).get("install", [])
    found = {dlc.canonical_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    return [f"{name}=={found[name]}" for name in names if name in found]


def _install_image(install: InstallSet, base: Layer, part: Path, log: Path, env: Mapping[str, str]) -> bool:
    """pip in a scratch venv that sees ``base`` installs what is missing; its site-packages is the layer."""
    scratch = part.with_name(part.name + ".venv")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(scratch)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        python = scratch / "bin" / "python"
        purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                      check=True, capture_output=True, text=True).stdout.strip())
        (purelib / "_sagemaker_emulator_base.pth").write_text(addsitedir_line(base.path))
        frozen = [f"{name}=={version}" for name, version in sorted(base.distributions().items())
                  if name in ("torch", "torchvision", "torchaudio")]
        constraints = _constraints_file(scratch / "constraints.txt", [*install.constraints, *frozen])
        ok = _install_steps(install, python, constraints, log, env)
        if ok and install.toolkits:
            ok = _install_toolkits(install, python, scratch, log, env)
        if ok:
            (purelib / "_sagemaker_emulator_base.pth").unlink()
            shutil.rmtree(purelib / "__pycache__", ignore_errors=True)
            purelib.rename(part)
        return ok
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _install_steps(install: InstallSet, python: Path, constraints: Path, log: Path, env: Mapping[str, str]) -> bool:
    """The image's packages: one resolution (then its ``--no-deps`` ones), or with
    :attr:`~emulator.job.dlc.InstallSet.steps` one pip run per step in AWS's order, then what the
    image's own file uninstalls (pip cannot reach the base layer, so only what the steps installed)."""
    steps = install.steps or dlc.single_steps(install)
    for step in steps:
        if not step.packages:
            continue
        held = [] if step.no_deps else ["-c", str(constraints)]
        if _run_pip(["--no-warn-script-location", *(["--no-deps"] if step.no_deps else []),
                     *_date_args(step.uploaded_prior_to), *held, *step.packages], log, env, python=str(python)) != 0:
            return False
    if install.uninstall:
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "uninstall", "-y", *install.uninstall],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=dict(env))
    return True


def _install_toolkits(install: InstallSet, python: Path, scratch: Path, log: Path, env: Mapping[str, str]) -> bool:
    """The toolkit pins without their dependencies, then what they require that is missing, with what
    is installed held (:func:`emulator.job.dlc.install_set` says why)."""
    if _run_pip(["--no-warn-script-location", "--no-deps", *install.toolkits], log, env, python=str(python)) != 0:
        return False
    frozen = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "freeze", "--all"],
                            capture_output=True, text=True, check=False, env=dict(env)).stdout
    held = _constraints_file(scratch / "held.txt", [line for line in frozen.splitlines() if "==" in line])
    missing = subprocess.run([str(python), str(Path(manifest.__file__)), "--missing",
                              *(t.split("==")[0] for t in install.toolkits)],
                             capture_output=True, text=True, check=False).stdout.split()
    return not missing or _run_pip(["--no-warn-script-location", "--prefer-binary", "-c", str(held), *missing], log,
                                   env, python=str(python)) == 0


def _constraints_file(path: Path, lines: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def addsitedir_line(folder: Path) -> str:
    """A ``.pth`` line that adds ``folder`` as a site directory (its own ``.pth`` files run)."""
    return f"import site; site.addsitedir({str(folder)!r})\n"


def write_manifest(folder: Path, record: Mapping[str, object] | None = None) -> dict[str, object]:
    """Record what ``folder`` (a site-packages layer) holds (:func:`emulator.backends.manifest.manifest`),
    with ``record`` added (the base layer's ``torch_index``: the CPU index its torch came from, None for PyPI)."""
    found: dict[str, object] = {**manifest.manifest([str(folder)]), **(record or {})}
    (folder / MANIFEST).write_text(json.dumps(found, indent=1) + "\n")
    return found
