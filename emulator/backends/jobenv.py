"""The job's Python environment (process backend): every job runs in one.

The toolkit installs ``requirements.txt`` with ``python -m pip install -r`` into the interpreter
that runs it. Never the user's own environment: hosts run a *job environment* — a venv whose
``.pth`` adds the *framework layers* of the job's DLC image (:mod:`emulator.backends.layers`: the
image's packages, then its torch builds) after the venv's own site-packages. Nothing installed on
this machine is visible (Lightning, transformers, pytest, ...), as on SageMaker, unless the
requirements install it. Environments are cached by the hash of the requirements, the layers and
this interpreter, prepared once under a file lock (parallel jobs and pytest-xdist workers share
them); one without requirements costs a ``python -m venv`` once (the layers are made once per
machine). Environments whose interpreter no longer exists (a removed clone's or CI run's venv) are
removed when the next one is made. The hosts' own ``pip install`` then finds everything installed
and needs no network. If the requirements fail, the job still runs, in a fresh throwaway venv, so
the toolkit's own install fails inside the hosts exactly as on SageMaker (``InstallModuleError``);
if a layer cannot be installed, nothing starts (:class:`~emulator.errors.BackendUnavailable`: the
DLC would have had it).

When the requirements replace a package the DLC ships (torch, numpy, torchvision, pandas, ...:
:attr:`emulator.job.dlc.Image.distributions`), pip does so on SageMaker too (its ``pip install -r``
runs in the DLC). The environment records each replacement (package, both versions, the
requirement that pulled it, from pip's ``Collecting X (from Y)`` lines) and
:func:`replacement_notes` says it once per job before the ranks start.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..cache import cache_dir
from ..job.dlc import InstallSet, canonical_name
from . import layers as framework_layers

if TYPE_CHECKING:
    from ..job.request import JobRequest

CACHE = cache_dir("envs")
#: A job environment's record of the interpreter that made it (removed once that is gone).
ORIGIN = ".sagemaker-emulator-origin"
#: A job environment's ``.pth`` naming what it sees after its own site-packages: the framework layers.
PTH = "_sagemaker_emulator_layers.pth"
#: How long preparing one job environment may take.
PREPARE_TIMEOUT = 1800


#: Imported at start-up by every interpreter of a job environment (a ``.pth`` line): a ``pip
#: install`` waits for the others. The hosts of one job share its environment, and each host's
#: toolkit runs ``pip install -r requirements.txt`` at the same time; a local-folder requirement
#: (``./pkg``) is rebuilt and reinstalled every time, and two concurrent reinstalls of it fail with
#: an ``OSError``. On SageMaker each host has its own container. Held until the process exits; pip's
#: own child interpreters (build isolation) inherit the marker and do not wait for their parent.
_PIP_LOCK_MODULE = """\
import os, sys
_ARGV = getattr(sys, "orig_argv", [])  # python -m pip install ... / bin/pip install ...
if ("install" in _ARGV and not os.environ.get("_SM_EMULATOR_PIP_LOCKED")
        and any(a == "pip" or a.endswith(("/pip", "/pip3")) for a in _ARGV[1:4])):
    import fcntl
    _LOCK = open(os.path.join(sys.prefix, ".sagemaker-emulator-pip.lock"), "a")
    fcntl.flock(_LOCK, fcntl.LOCK_EX)
    os.environ["_SM_EMULATOR_PIP_LOCKED"] = "1"
"""

def _create(venv: Path, layers: list[framework_layers.Layer]) -> Path:
    """A new job environment at ``venv`` seeing ``layers`` (in ``sys.path`` order)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    (venv / ORIGIN).write_text(sys.prefix)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, PTH).write_text("".join(framework_layers.addsitedir_line(layer.path) for layer in layers))
    Path(purelib, "_sagemaker_emulator_pip_lock.py").write_text(_PIP_LOCK_MODULE)
    Path(purelib, "_sagemaker_emulator_pip_lock.pth").write_text("import _sagemaker_emulator_pip_lock\n")
    # As in a DLC, `pip` and `torchrun` next to `python3` run this interpreter (SDK v3's
    # sm_train.sh needs `command -v pip`; its drivers run `torchrun` from PATH, whose ranks must
    # see what the requirements installed).
    for name, module in (("pip", "pip"), ("pip3", "pip"), ("torchrun", "torch.distributed.run")):
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport runpy, sys\nsys.argv[0] = {name!r}\n"
                          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
        script.chmod(0o755)
    _console_scripts(venv / "bin", python, layers)
    return python


def _console_scripts(bin_dir: Path, python: Path, layers: list[framework_layers.Layer]) -> None:
    """The console scripts of the layers' distributions (``accelerate``, ``deepspeed``, ``mlflow``,
    ...), as the DLC has them on ``PATH``, running this interpreter (a layer keeps no ``bin/``)."""
    from importlib import metadata

    for dist in metadata.distributions(path=[str(layer.path) for layer in layers]):
        for entry in dist.entry_points.select(group="console_scripts"):
            script = bin_dir / entry.name
            if script.exists() or "/" in entry.name:
                continue
            module, _, attr = entry.value.partition(":")
            call = f"getattr(importlib.import_module({module.strip()!r}), {attr.split('.')[0].strip()!r})"
            for part in attr.strip().split(".")[1:]:
                call = f"getattr({call}, {part!r})"
            script.write_text(f"#!{python}\nimport importlib, sys\nsys.argv[0] = {entry.name!r}\n"
                              f"sys.exit({call}())\n" if attr else
                              f"#!{python}\nimport runpy, sys\nrunpy.run_module({module.strip()!r}, "
                              "run_name='__main__', alter_sys=True)\n")
            script.chmod(0o755)


#: Changes when what a job environment holds changes (so older cached ones are not reused).
LAYOUT = b"7"


def requirements_of(source_dir: Path, requirements: Path | None = None) -> Path | None:
    """``requirements`` if given (SDK v3's ``SourceCode.requirements``), else the toolkit's
    ``<source_dir>/requirements.txt``; None when there is none."""
    req = requirements if requirements is not None else (
        source_dir / "requirements.txt" if source_dir.is_dir() else None)
    return req if req is not None and req.is_file() else None


#: What :func:`install_of` chose, by (framework selection, instance type, index setting, layers
#: folder), once the chosen torch layer is made: a made layer wins the choice
#: (:func:`emulator.backends.layers.torch_source`), so it stays the answer in this process, and a
#: job's plan, preparation and records (eight calls) look at the layers once, not each time.
_MADE: dict[tuple[object, ...], InstallSet] = {}


def install_of(request: JobRequest) -> InstallSet:
    """What the job's DLC image installs (:func:`emulator.job.frameworks.install_for`), its torch
    from the CPU index or from PyPI as :func:`emulator.backends.layers.torch_source` decides (an
    existing torch layer first; a probe of the index only when there is none)."""
    from ..job import dlc, frameworks

    selection, instance_type = request.framework, request.instance_groups[0].type
    key = (selection, instance_type, dlc.torch_index_setting(os.environ), str(framework_layers.LAYERS))
    if key in _MADE:
        return _MADE[key]

    def of(index: str | None) -> InstallSet:
        return frameworks.install_for(selection, instance_type, torch_index=index)

    install = framework_layers.torch_source(of)
    if framework_layers.base_layer(install).ready:
        _MADE[key] = install
    return install


def _key(req: Path | None, install: InstallSet) -> str:
    data = LAYOUT + (req.read_bytes() if req is not None else b"") + sys.prefix.encode() + sys.version.encode()
    data += b"\0layers\0" + "\0".join(layer.path.name for layer in framework_layers.layers(install)).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def interpreter(source_dir: Path, requirements: Path | None, install: InstallSet) -> str:
    """The interpreter a job whose source is ``source_dir`` runs with (reads only): the cached job
    environment's for its requirements file and ``install``'s layers (made by :func:`prepare`)."""
    req = requirements_of(source_dir, requirements)
    return str(CACHE / _key(req, install) / "bin" / "python")


def is_ready(python: str) -> bool:
    """Whether ``python`` (from :func:`interpreter`) can run now: this interpreter, or a job
    environment :func:`prepare` has finished."""
    return Path(python) == Path(sys.executable) or (Path(python).parent.parent / ".ready").is_file()


def torch_version(python: str) -> str | None:
    """The torch release ``python`` imports (a job environment's own, else the user's), read from
    the installed distributions' metadata (reads only; None: no torch)."""
    from importlib import metadata

    venv = Path(python).parent.parent
    if Path(python) != Path(sys.executable) and (venv / "pyvenv.cfg").is_file():
        # By name: importlib finds torch's dist-info by its folder's name, without reading the
        # metadata of every distribution on the way (about 250 in a layered job environment).
        for dist in metadata.distributions(name="torch", path=_own_folders(venv)):
            return dist.version
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _pip(python: Path, args: list[str], log: Path, cwd: Path, env: Mapping[str, str] | None) -> int:
    with open(log, "ab") as out:
        return subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args],
                              stdout=out, stderr=subprocess.STDOUT, cwd=cwd, timeout=PREPARE_TIMEOUT,
                              check=False, env=None if env is None else dict(env)).returncode


#: Where a job environment records what its requirements replaced (a JSON list).
REPLACED = ".sagemaker-emulator-replaced.json"


def _dist_name(requirement: str) -> str:
    from packaging.requirements import Requirement  # when used: see frameworks.canonical_name

    return canonical_name(Requirement(requirement).name)


def watched(install: InstallSet) -> tuple[str, ...]:
    """Distributions whose replacement by the requirements is reported: what the DLC ships."""
    names = [*(_dist_name(r) for r in install.torch), *sorted(install.image.distributions)]
    return tuple(dict.fromkeys(n for n in names if n))


def _versions(python: Path, names: tuple[str, ...]) -> dict[str, str]:
    code = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n"
            "        pass\nprint(json.dumps(out))\n")
    done = subprocess.run([str(python), "-c", code, *names], capture_output=True, text=True, check=False,
                          timeout=120)
    try:
        result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {}
    return result


def replacements(before: Mapping[str, str], after: Mapping[str, str], pip_output: str) -> list[dict[str, str]]:
    """What changed between ``before`` and ``after`` (``{distribution: version}``), each with the
    requirement that pulled it: the ``from`` chain of pip's ``Collecting <name>... (from <chain>)``
    line (pip prints it for every requirement it resolves), else ``requirements.txt``."""
    out = []
    for name, old in before.items():
        new = after.get(name)
        if new is None or _release(new) == _release(old):
            continue
        pulled = "requirements.txt"
        for line in pip_output.splitlines():
            # "Collecting torch>=2 (from ...)"; a local file: "Processing ./torch-2.8.0-....whl (from ...)"
            match = re.match(r"\s*(?:Collecting|Processing)\s+(\S+).*?\(from (.+)\)\s*$", line)
            if match and _dist_name(_requirement_of(match.group(1))) == name:
                pulled = match.group(2)
                break
        out.append({"package": name, "before": old, "after": new, "pulled_by": pulled})
    return out


def _requirement_of(token: str) -> str:
    """A requirement as pip logs it, or the distribution name of a wheel/sdist path it processes."""
    base = token.rsplit("/", 1)[-1]
    if base.endswith((".whl", ".tar.gz", ".zip")):
        match = re.match(r"(.+?)-\d", base)
        return match.group(1) if match else base
    return token


def _release(version: str) -> str:
    return version.split("+")[0]


def replacement_notes(python: str) -> list[str]:
    """What the job environment of ``python`` replaced of the DLC's packages, for people (empty
    for this interpreter or nothing replaced)."""
    path = Path(python).parent.parent / REPLACED
    try:
        items = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    notes = []
    for item in items:
        what = "upgraded" if _newer(item["after"], item["before"]) else "downgraded"
        meaning = (" On SageMaker the same pip step does the same in the DLC: SMDDP, the DLC's CUDA/NCCL build and "
                   f"its other packages were built for torch {item['before']}, so the job runs on a torch the DLC was "
                   "not made for; pin what pulled it to keep the DLC's torch." if item["package"] == "torch" else
                   " On SageMaker the same pip step does the same in the DLC; packages built against "
                   f"{item['package']} {item['before']} may not work with it.")
        notes.append(f"requirements.txt {what} the DLC's {item['package']} {item['before']} to {item['after']} "
                     f"(pulled by {item['pulled_by']}).{meaning}")
    return notes


def _newer(a: str, b: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", _release(v))[:4])
    return key(a) > key(b)


def prepare(source_dir: Path, scratch: Path, log: Path, install: InstallSet, *, requirements: Path | None = None,
            env: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """Return ``(python, prepared)`` for a job whose source is ``source_dir``.

    The cached job environment's interpreter (:func:`interpreter`), making it first if needed: the
    framework layers of ``install`` (once per machine), the venv, then the requirements (pip's
    output to ``log``; pip runs with ``env``: the supervisor passes the hosts' environment, so
    nothing of the caller's reaches it; default: this process's).
    Raises :class:`~emulator.errors.BackendUnavailable` when a layer cannot be installed.
    """
    req = requirements_of(source_dir, requirements)
    cwd = req.parent if req is not None else source_dir
    layers = framework_layers.ensure(install, log, env=env)
    key = _key(req, install)
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / key
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".ready").exists():
            return str(venv / "bin" / "python"), True
        shutil.rmtree(venv, ignore_errors=True)
        _sweep()
        python = _create(venv, layers)
        names = watched(install)
        before = _versions(python, names) if req is not None else {}
        start = log.stat().st_size if log.exists() else 0
        if req is None or _pip(python, ["-r", str(req)], log, cwd, env) == 0:
            if req is not None:
                with open(log, "rb") as out:
                    out.seek(start)
                    output = out.read().decode(errors="replace")
                changed = replacements(before, _versions(python, names), output)
                (venv / REPLACED).write_text(json.dumps(changed))
            (venv / ".ready").touch()
            return str(python), True
        shutil.rmtree(venv, ignore_errors=True)
    throwaway = scratch / "jobenv"
    return str(_create(throwaway, layers)), False


def requirement_modules(python: str) -> frozenset[str] | None:
    """Top-level modules of what the job's requirements installed into the job environment of
    ``python`` (its own site-packages; read from the installed files); None until it is made."""
    from .manifest import manifest

    venv = Path(python).parent.parent
    if not is_ready(python) or Path(python) == Path(sys.executable):
        return None
    folders = [str(p) for p in venv.glob("lib/python*/site-packages")]
    return frozenset(manifest([*folders])["modules"])


def layer_folders(venv: Path) -> list[str]:
    """The framework layers a job environment sees (from its ``.pth``), in ``sys.path`` order."""
    out = []
    for pth in venv.glob(f"lib/python*/site-packages/{PTH}"):
        out += re.findall(r"site\.addsitedir\('([^']+)'\)", pth.read_text())
    return out


def _own_folders(venv: Path) -> list[str]:
    """Where a job environment's own packages are: its site-packages, then its framework layers."""
    return [*(str(p) for p in venv.glob("lib/python*/site-packages")), *layer_folders(venv)]


def _sweep() -> None:
    """Remove job environments whose interpreter is gone (:data:`ORIGIN`; or that have none: an
    older layout's, unreachable since :data:`LAYOUT` changed), skipping any being prepared."""
    for venv in CACHE.iterdir():
        if not venv.is_dir():
            continue
        origin = venv / ORIGIN
        if origin.is_file() and Path(origin.read_text().strip()).is_dir():
            continue
        with open(CACHE / f"{venv.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being made right now (its origin is written first, a moment after)
            shutil.rmtree(venv, ignore_errors=True)
