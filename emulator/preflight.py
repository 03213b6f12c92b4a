"""Checks that need the backend, made before any host starts (``run`` and ``plan`` both call them).

:func:`check` raises before anything is written or started:

- :class:`~emulator.errors.RequestError` for a ``CheckpointConfig.LocalPath`` the backend cannot
  give the hosts (see :func:`checkpoint_path`);
- :class:`MissingPackage` when the job's Python lacks a package the job needs (process backend,
  where hosts run this machine's interpreter or a job environment layered on it; see
  :func:`missing_packages`).

What the package check catches and what it does not:

- ``mpi4py`` for the MPI family (``mpi``, ``smdistributed``, ``pytorchddp``): the toolkit starts
  every rank as ``python -m mpi4py <entry point>``, so without it every rank fails with
  ``No module named mpi4py``. The PyTorch DLCs ship it; your Python may not.
- Lightning (``lightning``, ``pytorch_lightning``, ``lightning_fabric``) when a ``.py`` file of
  the source dir imports it unconditionally. Found by reading the files (``ast``, nothing is run):
  imports inside a ``try`` that handles ``ImportError``/``ModuleNotFoundError``/``Exception`` are
  optional and not counted. Not caught: imports made through ``importlib``/``__import__``, by
  installed packages, or in files outside the source dir. No PyTorch DLC ships Lightning: on
  SageMaker the job lists it in ``requirements.txt``, and here a ``requirements.txt`` that names
  it satisfies the check too (the job environment installs it).
- Not checked: the docker backend (its image brings its own Python) and SDK v3 jobs (the request's
  container command runs, not the toolkit's runners).
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

from .backends.base import Backend
from .distribution import runner_for
from .errors import BackendUnavailable, RequestError
from .inhost import protocol as P
from .request import JobRequest

#: Lightning's import names (the package ``pytorch-lightning`` brings the first and the last).
LIGHTNING_MODULES = ("pytorch_lightning", "lightning", "lightning_fabric")
#: The pip distribution that provides each module, for the install command.
DISTRIBUTIONS = {"mpi4py": "mpi4py", "pytorch_lightning": "pytorch-lightning", "lightning": "lightning",
                 "lightning_fabric": "pytorch-lightning"}
#: Any of these in the job's requirements.txt counts for any Lightning module (the host fails as on
#: SageMaker if it was the wrong one).
LIGHTNING_DISTRIBUTIONS = frozenset({"pytorch-lightning", "lightning", "lightning-fabric"})
#: What the PyTorch DLCs ship (what a SageMaker job finds without a requirements.txt).
IN_DLC = frozenset({"mpi4py"})
#: The source files read for imports (a source dir with more is read up to these limits).
MAX_FILES = 500
MAX_FILE_BYTES = 1 << 20
#: Paths a checkpoint folder may not be mounted over (the host would lose its system folders).
SYSTEM_PATHS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
                          "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
                          P.OPT_ML})
_OPTIONAL_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class MissingPackage(BackendUnavailable):
    """The job's Python lacks a package the job needs (see the module docstring)."""


def check(request: JobRequest, backend: Backend) -> None:
    """Every pre-start check for ``request`` on ``backend`` (reads only)."""
    checkpoint_path(request, backend)
    python = backend.job_python(request)
    if python is not None:
        missing = missing_packages(request, python)
        if missing:
            raise MissingPackage(describe_missing(missing, python))


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
    """The modules the job needs that ``python`` (the job's interpreter) cannot import, in the
    order :data:`DISTRIBUTIONS` lists them (empty for SDK v3 container commands)."""
    if request.container_command:
        return []
    needed = []
    if runner_for(request.hyperparameters) in ("mpi", "smdataparallel"):
        needed.append("mpi4py")
    imported = imported_modules(request.source_dir)
    needed += [m for m in LIGHTNING_MODULES if m in imported]
    if not needed:
        return []
    requirements = _requirements_names(request)
    needed = [m for m in needed if _normalise(DISTRIBUTIONS[m]) not in requirements
              and not (m in LIGHTNING_MODULES and requirements & LIGHTNING_DISTRIBUTIONS)]
    interpreter = python if Path(python).exists() else sys.executable  # a job env not built yet layers on this
    found = importable(interpreter, needed) if needed else {}
    return [m for m in needed if not found.get(m, False)]


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
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            with _AST_LOCK:
                tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue  # a file Python cannot parse fails in the host, as on SageMaker
        names |= _imports(tree)
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


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements_names(request: JobRequest) -> set[str]:
    """Distribution names a ``requirements.txt`` of the job lists (what the job environment installs)."""
    path = request.requirements_file or request.source_dir / "requirements.txt"
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return set()
    names = set()
    for line in lines:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split("#", 1)[0])
        if match and not line.lstrip().startswith("-"):
            names.add(_normalise(match.group(1)))
    return names


def describe_missing(modules: list[str], python: str) -> str:
    """The message for :class:`MissingPackage`: which package, how to install it, where DLCs stand."""
    parts = []
    for module in modules:
        dist = DISTRIBUTIONS[module]
        if module in IN_DLC:
            why = ("the toolkit starts every rank of an MPI-family job (mpi, smdistributed, pytorchddp) as "
                   f"`python -m mpi4py`; SageMaker's PyTorch DLCs ship {dist}, your Python does not")
        else:
            why = (f"a file of the source dir imports {module}; no PyTorch DLC ships Lightning (on SageMaker list "
                   f"{dist} in the source dir's requirements.txt, which also works here)")
        parts.append(f"{module} is not installed in the job's Python ({python}): {why}. Install it with "
                     f"`{python} -m pip install {dist}`" + (" (it needs Open MPI: apt-get install libopenmpi-dev)"
                                                            if module == "mpi4py" else ""))
    return "; ".join(parts)
