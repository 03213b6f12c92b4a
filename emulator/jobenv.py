"""The job's Python environment, when the source dir has a ``requirements.txt`` or the job names
a ``framework_version`` (process backend).

The toolkit installs ``requirements.txt`` with ``python -m pip install -r`` into the interpreter
that runs it. Never the user's own environment: hosts run a *job environment* — a venv layered on
the user's (a ``.pth`` puts the user's site-packages after the venv's), so the user's torch is
reused and what the requirements add or pin wins. A ``framework_version`` adds the family's torch
(and its pins, e.g. ``numpy<2``) to the venv first, so it shadows the user's torch as the DLC's
would. Environments are cached by the hash of the requirements, the framework pins and the user's
interpreter, prepared once under a file lock (parallel jobs and pytest-xdist workers share them).
The hosts' own ``pip install`` then finds everything installed and needs no network. If the
requirements fail, the job still runs, in a fresh throwaway venv, so the toolkit's own install
fails inside the hosts exactly as on SageMaker (``InstallModuleError``); if the framework's torch
cannot be installed, nothing starts (:class:`~emulator.errors.BackendUnavailable`: the DLC would
have had it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import BackendUnavailable

if TYPE_CHECKING:
    from .frameworks import Selection

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sagemaker-emulator" / "envs"
#: How long preparing one job environment may take.
PREPARE_TIMEOUT = 1800


def _user_site_paths() -> list[str]:
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    user = site.getusersitepackages()
    if isinstance(user, str) and os.path.isdir(user):
        paths.append(user)
    return paths


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

def _create(venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_sagemaker_emulator_user_site.pth").write_text("\n".join(_user_site_paths()) + "\n")
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
    return python


#: Changes when what a job environment holds changes (so older cached ones are not reused).
LAYOUT = b"3"


def requirements_of(source_dir: Path, requirements: Path | None = None) -> Path | None:
    """``requirements`` if given (SDK v3's ``SourceCode.requirements``), else the toolkit's
    ``<source_dir>/requirements.txt``; None when there is none."""
    req = requirements if requirements is not None else (
        source_dir / "requirements.txt" if source_dir.is_dir() else None)
    return req if req is not None and req.is_file() else None


def framework_pins(selection: Selection | None) -> tuple[str, ...]:
    """What a job environment installs for ``selection``: the family's torch and its pins
    (nothing for no framework or ``current``: the user's torch)."""
    if selection is None or selection.family is None:
        return ()
    return (selection.family.requirement, *selection.family.constraints)


def _key(req: Path | None, pins: tuple[str, ...] = ()) -> str:
    data = LAYOUT + (req.read_bytes() if req is not None else b"") + sys.prefix.encode() + sys.version.encode()
    if pins:  # keys of environments without a framework stay what they were
        data += b"\0framework\0" + "\n".join(pins).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def interpreter(source_dir: Path, requirements: Path | None = None, *, framework: tuple[str, ...] = ()) -> str:
    """The interpreter a job whose source is ``source_dir`` runs with (reads only): this one, or
    the cached job environment's when there is a requirements file or ``framework`` pins."""
    req = requirements_of(source_dir, requirements)
    if req is None and not framework:
        return sys.executable
    return str(CACHE / _key(req, framework) / "bin" / "python")


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
        for dist in metadata.distributions(path=[str(p) for p in venv.glob("lib/python*/site-packages")]):
            if (dist.metadata["Name"] or "").lower() == "torch":
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


def prepare(source_dir: Path, scratch: Path, log: Path, *, requirements: Path | None = None,
            env: Mapping[str, str] | None = None, framework: tuple[str, ...] = ()) -> tuple[str, bool]:
    """Return ``(python, prepared)`` for a job whose source is ``source_dir``.

    Without a ``requirements.txt`` or ``framework`` pins: this interpreter, nothing to do. Else the
    cached job environment's interpreter (:func:`interpreter`), installing the pins and then the
    requirements first if needed (output to ``log``; pip runs with ``env``: the supervisor passes
    the hosts' environment, so nothing of the caller's reaches it; default: this process's).
    Raises :class:`~emulator.errors.BackendUnavailable` when the pins cannot be installed.
    """
    req = requirements_of(source_dir, requirements)
    if req is None and not framework:
        return sys.executable, True
    cwd = req.parent if req is not None else source_dir
    key = _key(req, framework)
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / key
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".ready").exists():
            return str(venv / "bin" / "python"), True
        shutil.rmtree(venv, ignore_errors=True)
        python = _create(venv)
        if framework and _pip(python, list(framework), log, cwd, env) != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise BackendUnavailable(f"could not install {' '.join(framework)} into the job environment "
                                     f"(the DLC's torch); pip's output: {log}")
        if req is None or _pip(python, ["-r", str(req)], log, cwd, env) == 0:
            (venv / ".ready").touch()
            return str(python), True
        shutil.rmtree(venv, ignore_errors=True)
    throwaway = scratch / "jobenv"
    return str(_create(throwaway)), False
