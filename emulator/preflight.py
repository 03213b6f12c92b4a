"""Checks that need the backend, made before any host starts (``run`` and ``plan`` both call them).

:func:`check` raises before anything is written or started: :class:`~emulator.errors.RequestError`
for a ``CheckpointConfig.LocalPath`` the backend cannot give the hosts (see :func:`checkpoint_path`);
and returns warnings (printed before start, kept in ``job.json``):

- :func:`mpi_warnings`: an MPI-family job (``mpi``, ``smdistributed``, ``pytorchddp``) on an image
  that does not ship mpi4py (AWS's files: the 2.11+ GPU images, 1.12 CPU) and a ``requirements.txt``
  that does not add it: the toolkit starts every rank as ``python -m mpi4py``, which fails there.

:func:`package_warnings` needs the job's world (:class:`~emulator.backends.base.World`: what the DLC
image's packages provide as installed here, and what the job's ``requirements.txt`` installed, read
from the installed files), so ``run`` calls it once the job's Python is prepared, still before any
host starts (``plan``: when the backend has it already). For each top-level package a ``.py`` file of
the source dir imports unconditionally (:func:`reachable_imports`; ``ast``, nothing is run; imports
inside a ``try`` that handles ``ImportError``/``ModuleNotFoundError``/``Exception`` are optional):

- neither the DLC nor the requirements provide it: on SageMaker every rank fails at that import
  (e.g. Lightning, which no PyTorch DLC ships);
- the DLC ships it but the emulator does not install it here (:attr:`emulator.job.dlc.Image.gaps`):
  the job imports it on SageMaker; the emulator says that this is its own gap.

Not caught: imports made through ``importlib``/``__import__``, by installed packages, or in files
outside the source dir. Not checked: SDK v3 jobs with a container command (the request's command runs,
not the toolkit's runners).
"""

from __future__ import annotations

import ast
import re
import sys
import threading
from pathlib import Path

from .backends import jobenv
from .backends.base import Backend, World
from .errors import RequestError
from .inhost import protocol as P
from .job import dlc, frameworks
from .job.distribution import runner_for
from .job.request import JobRequest

#: The source files read for imports (a source dir with more is read up to these limits).
MAX_FILES = 500
MAX_FILE_BYTES = 1 << 20
#: Paths a checkpoint folder may not be mounted over (the host would lose its system folders).
SYSTEM_PATHS = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
                          "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
                          P.OPT_ML})
_OPTIONAL_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def check(request: JobRequest, backend: Backend) -> list[str]:
    """Every pre-start check for ``request`` on ``backend`` that needs no prepared Python (reads
    only); returns warnings. :func:`package_warnings` comes once the job's world is known."""
    checkpoint_path(request, backend)
    return mpi_warnings(request)


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
def mpi_warnings(request: JobRequest) -> list[str]:
    """The warning for an MPI-family job whose image lacks mpi4py (see the module docstring)."""
    if request.container_command or runner_for(request.hyperparameters) not in ("mpi", "smdataparallel"):
        return []
    image = request.dlc_image
    if "mpi4py" in image.distributions or "mpi4py" in _requirements_names(request):
        return []
    return [f"this MPI-family job starts every rank as `python -m mpi4py`, and {image.label} does not ship mpi4py "
            f"({image.source}) nor does the job's requirements.txt add it: on SageMaker every rank fails with "
            "No module named mpi4py. Add mpi4py to requirements.txt, or use a DLC that ships it"]


def undeclared_imports(request: JobRequest, world: World) -> tuple[list[str], dict[str, str]]:
    """``(missing, gaps)``: top-level modules the source dir imports that neither the job's DLC
    nor its ``requirements.txt`` provides, sorted; and those the DLC ships that the emulator does not
    install here, with why (both empty for SDK v3 container commands)."""
    if request.container_command:
        return [], {}
    imported = reachable_imports(request.source_dir, request.entry_point) - _local_modules(request.source_dir)
    imported -= set(sys.stdlib_module_names) | {"__future__"}
    imported -= world.modules | world.requirements
    if request.has_smddp(request.instance_groups[0].type):  # the in-host stand-in provides it
        imported.discard("smdistributed")
    gap_modules = request.dlc_image.gap_modules()
    gaps = {m: gap_modules[m] for m in sorted(imported) if m in gap_modules}
    return sorted(m for m in imported if m not in gaps), gaps


def package_warnings(request: JobRequest, world: World) -> list[str]:
    """:func:`undeclared_imports` as warnings for people."""
    missing, gaps = undeclared_imports(request, world)
    label = frameworks.image_label(request.framework, request.instance_groups[0].type)
    out = [f"the source dir imports {module}, which {label} does not ship and the job's requirements.txt does not "
           f"install: on SageMaker every rank fails with ModuleNotFoundError: No module named {module!r}. Add the "
           f"package that provides it to {request.source_dir}/requirements.txt" for module in missing]
    for module, why in gaps.items():
        there = ("whether it imports on SageMaker is not known" if "on SageMaker is not known" in why
                 else "on SageMaker the import works")
        out.append(f"the source dir imports {module}, which {label} ships but the emulator cannot install here "
                   f"({why}): {there}; here it fails with ModuleNotFoundError. This is the emulator's gap, not "
                   "your job's")
    return out


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
            names.add(dlc.canonical_name(match.group(1)))
    return names
