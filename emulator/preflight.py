"""Checks that need the backend, made before any host starts (``run`` and ``plan`` both call them).

:func:`check` raises before anything is written or started:

- :class:`~emulator.errors.RequestError` for a ``CheckpointConfig.LocalPath`` the backend cannot
  give the hosts (see :func:`checkpoint_path`);
- :class:`MissingPackage` when the emulator's own Python lacks ``mpi4py`` for an MPI-family job
  (process backend): the toolkit starts every rank as ``python -m mpi4py <entry point>``, and
  every PyTorch DLC ships mpi4py, so this is the emulator's installation, not the job's (the
  message never advises installing into the caller's Python for the job's sake: it names the
  emulator's ``mpi`` extra and the docker backend).

and returns warnings (printed before start, kept in ``job.json``):

- :func:`undeclared_imports`: top-level packages a ``.py`` file of the source dir imports
  unconditionally that neither the framework family's DLC ships
  (:func:`emulator.job.frameworks.dlc_modules`) nor the job's ``requirements.txt`` names. On SageMaker
  such a job dies at the import (``ModuleNotFoundError``); e.g. Lightning, which no PyTorch DLC
  ships. Found by reading the files (``ast``, nothing is run): imports inside a ``try`` that
  handles ``ImportError``/``ModuleNotFoundError``/``Exception`` are optional and not counted;
  modules of the source dir itself and the standard library are not counted. Not caught:
  imports made through ``importlib``/``__import__``, by installed packages, or in files outside
  the source dir; a requirement whose import name differs from its distribution name and is not
  in :data:`emulator.job.frameworks.IMPORT_NAMES` counts only through this machine's metadata of it.
- Not checked: SDK v3 jobs with a container command (the request's command runs, not the
  toolkit's runners).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from .backends import jobenv
from .backends.base import Backend
from .errors import BackendUnavailable, RequestError
from .inhost import protocol as P
from .job import frameworks
from .job.distribution import runner_for
from .job.request import JobRequest

#: The emulator's extra that brings mpi4py (pyproject.toml ``[project.optional-dependencies]``).
MPI_EXTRA = "sagemaker-emulator[mpi]"
#: The source files read for imports (a source dir with more is read up to these limits).
MAX_FILES = 500
MAX_FILE_BYTES = 1 << 20
#: Paths a checkpoint folder may not be mounted over (the host would lose its system folders).
SYSTEM_PATHS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
                          "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
                          P.OPT_ML})
_OPTIONAL_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class MissingPackage(BackendUnavailable):
    """The emulator's Python lacks a package every DLC has (see the module docstring)."""


def check(request: JobRequest, backend: Backend) -> list[str]:
    """Every pre-start check for ``request`` on ``backend`` (reads only); returns warnings."""
    checkpoint_path(request, backend)
    python = backend.job_python(request)
    if python is not None:
        missing = missing_packages(request, python)
        if missing:
            raise MissingPackage(describe_missing(missing, python))
    return undeclared_warnings(request)


# -- checkpoint path ------------------------------------------------------------------------------
def checkpoint_path(request: JobRequest, backend: Backend) -> None:
    """Refuse a ``CheckpointConfig.LocalPath`` outside ``/opt/ml`` that the hosts cannot get.

    Honoured: a path under ``/opt/ml`` (a folder of the host's tree), and elsewhere a per-host
    folder mounted at the path (restored from and synced to ``CheckpointConfig.S3Uri`` as
    ``/opt/ml/checkpoints`` is). Refused: system folders (the host would lose them), and on the
    process backend, which shares this machine's filesystem outside ``/opt/ml`` and ``/tmp``, a
    path whose mount point would have to be created on this machine (under ``/tmp``, or ``/opt``
    when this machine has no ``/opt/ml``, the host has its own; an existing folder is fine)."""
    local = request.checkpoint_local_path.rstrip("/") or "/"
    if request.checkpoint_dir is None or local.startswith(f"{P.OPT_ML}/"):
        return
    field = "CheckpointConfig.LocalPath"
    allowed = (f"a path under {P.OPT_ML} (default {P.OPT_ML}/checkpoints) or another absolute path that is not "
               "a system folder")
    if local in SYSTEM_PATHS or P.OPT_ML.startswith(local + "/") or local.startswith(("/proc/", "/sys/", "/dev/")):
        raise RequestError(field, f"{local} is a system folder; mounting the checkpoints over it would hide it",
                           allowed=allowed)
    if not backend.shares_machine_filesystem:
        return
    private = local.startswith("/tmp/") or (local.startswith("/opt/") and not Path(P.OPT_ML).is_dir())
    if not private and not Path(local).is_dir():
        raise RequestError(
            field, f"{local} does not exist on this machine, and the process backend's hosts share this machine's "
            "filesystem outside /opt/ml and /tmp, so its mount point would be created here",
            allowed=f"{allowed}: on the process backend under /opt/ml, /tmp or /opt, or an existing folder; any "
            "path with --backend docker")


# -- packages in the job's Python -----------------------------------------------------------------
def missing_packages(request: JobRequest, python: str) -> list[str]:
    """``["mpi4py"]`` when the job is of the MPI family and ``python`` (the job's interpreter, or
    this one while its job environment is not built) cannot import it; else empty."""
    if request.container_command or runner_for(request.hyperparameters) not in ("mpi", "smdataparallel"):
        return []
    if "mpi4py" in _requirements_names(request):
        return []
    interpreter = python if Path(python).exists() else sys.executable
    return [] if importable(interpreter, ["mpi4py"]).get("mpi4py", False) else ["mpi4py"]


def undeclared_imports(request: JobRequest) -> list[str]:
    """Top-level modules the source dir imports that neither its framework family's DLC nor its
    ``requirements.txt`` provides, sorted (empty for SDK v3 container commands)."""
    if request.container_command:
        return []
    imported = reachable_imports(request.source_dir, request.entry_point) - _local_modules(request.source_dir)
    imported -= set(sys.stdlib_module_names) | {"__future__"}
    selection = request.framework
    imported -= frameworks.dlc_modules(selection.family if selection is not None else None)
    if not imported:
        return []
    provided = _provided_by_requirements(_requirements_names(request))
    return sorted(m for m in imported if m not in provided)


def undeclared_warnings(request: JobRequest) -> list[str]:
    """:func:`undeclared_imports` as warnings for people."""
    dlc = frameworks.dlc_label(request.framework)
    return [f"the source dir imports {module}, which {dlc} does not ship and no requirements.txt of the job names: "
            f"on SageMaker every rank fails with ModuleNotFoundError: No module named {module!r}. Add the package "
            f"that provides it to {request.source_dir}/requirements.txt" for module in undeclared_imports(request)]


def reachable_imports(source_dir: Path, entry_point: str) -> set[str]:
    """Top-level modules imported unconditionally by the entry point and by the source dir's own
    modules it imports, transitively (a launcher next to ``train.py`` that the job never imports
    is not read). An entry point that is not a ``.py`` file: every file of the source dir."""
    entry = source_dir / entry_point
    if entry.suffix != ".py" or not entry.is_file():
        return imported_modules(source_dir)
    local = _local_modules(source_dir)
    names: set[str] = set()
    todo, seen = [entry], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        found = _file_imports(path)
        names |= found
        for module in found & local:
            target = source_dir / module
            todo += sorted(target.rglob("*.py")) if target.is_dir() else [target.with_suffix(".py")]
    return names


def _file_imports(path: Path) -> set[str]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return set()
        with _AST_LOCK:
            tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return set()
    return _imports(tree)


def _local_modules(source_dir: Path) -> set[str]:
    """Modules and packages of the source dir itself (importable from the working directory)."""
    if not source_dir.is_dir():
        return set()
    return {p.stem if p.suffix == ".py" else p.name for p in source_dir.iterdir()
            if p.suffix == ".py" or (p.is_dir() and not p.name.startswith("."))}


def _provided_by_requirements(names: set[str]) -> set[str]:
    """Import names the requirements bring: each one's own, and those of its dependencies as this
    machine's installed metadata lists them (best effort: a requirement not installed here counts
    for its own import name only)."""
    from importlib import metadata

    provided = {frameworks.import_name(n) for n in names}
    seen: set[str] = set()
    todo = list(names)
    by_dist = _top_levels()
    while todo:
        name = frameworks.canonical_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        provided |= by_dist.get(name, set())
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req:
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if match:
                todo.append(match.group(1))
    return provided


def _top_levels() -> dict[str, set[str]]:
    """``{normalised distribution: its top-level modules}`` of this machine's installed packages."""
    from importlib import metadata

    out: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(frameworks.canonical_name(dist), set()).add(module)
    return out


def importable(python: str, modules: list[str]) -> dict[str, bool]:
    """Which of ``modules`` ``python`` finds (``importlib.util.find_spec``, nothing is imported
    beyond their parent packages), run with the environment a host gives it (no ``PYTHONPATH``)."""
    code = ("import importlib.util, json, sys\n"
            "def found(m):\n"
            "    try:\n        return importlib.util.find_spec(m) is not None\n"
            "    except (ImportError, ValueError):\n        return False\n"
            "print(json.dumps({m: found(m) for m in sys.argv[1:]}))\n")
    env = {k: os.environ[k] for k in ("HOME", "PATH", "LD_LIBRARY_PATH") if k in os.environ}
    done = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=env, cwd="/",
                          timeout=120, check=False)
    if done.returncode != 0:
        raise BackendUnavailable(f"the job's Python {python} does not run: {done.stderr.strip()[-500:]}")
    result: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


#: One ``ast.parse`` at a time: CPython before 3.11.8/3.12.1 can fail two concurrent ones (jobs run
#: from threads) with "SystemError: AST constructor recursion depth mismatch" (gh-106905).
_AST_LOCK = threading.Lock()


def imported_modules(source_dir: Path) -> set[str]:
    """Top-level names of the modules the ``.py`` files under ``source_dir`` import
    unconditionally (see the module docstring)."""
    names: set[str] = set()
    files = sorted(source_dir.rglob("*.py")) if source_dir.is_dir() else []
    for path in files[:MAX_FILES]:
        names |= _file_imports(path)  # a file Python cannot parse fails in the host, as on SageMaker
    return names


def _imports(tree: ast.AST) -> set[str]:
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            optional |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _OPTIONAL_IMPORT_ERRORS for t in types)


def _requirements_names(request: JobRequest) -> set[str]:
    """Distribution names a ``requirements.txt`` of the job lists (what the job environment installs)."""
    path = jobenv.requirements_of(request.source_dir, request.requirements_file)
    if path is None:
        return set()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return set()
    names: set[str] = set()
    for line in lines:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if match and not line.lstrip().startswith("-"):
            names.add(frameworks.canonical_name(match.group(1)))
    return names


def describe_missing(modules: list[str], python: str) -> str:
    """The message for :class:`MissingPackage` (only ``mpi4py`` today)."""
    return "; ".join(
        f"{module} is not installed in the emulator's Python ({python}): the toolkit starts every rank of an "
        f"MPI-family job (mpi, smdistributed, pytorchddp) as `python -m {module}`, and SageMaker's PyTorch DLCs ship "
        f"{module}. It is part of the DLC the emulator stands in for, not of your job: install the emulator with its "
        f"mpi extra (`pip install '{MPI_EXTRA}'`, which needs Open MPI: apt-get install libopenmpi-dev) or run the job "
        "with --backend docker, whose images have it" for module in modules)
