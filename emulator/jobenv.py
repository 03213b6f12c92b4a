"""The job's Python environment, when the source dir has a ``requirements.txt``.

The toolkit installs ``requirements.txt`` with ``python -m pip install -r`` into the interpreter
that runs it. Never the user's own environment: hosts run a *job environment* — a venv layered on
the user's (a ``.pth`` puts the user's site-packages after the venv's), so the user's torch is
reused and what the requirements add or pin wins. Environments are cached by the hash of the
requirements and the user's interpreter, prepared once under a file lock (parallel jobs and
pytest-xdist workers share them). The hosts' own ``pip install`` then finds everything installed
and needs no network. If the preparation fails, the job still runs, in a fresh throwaway venv, so
the toolkit's own install fails inside the hosts exactly as on SageMaker (``InstallModuleError``).
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

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sagemaker-emulator" / "envs"
#: How long preparing one job environment may take.
PREPARE_TIMEOUT = 1800


def _user_site_paths() -> list[str]:
    paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
    user = site.getusersitepackages()
    if isinstance(user, str) and os.path.isdir(user):
        paths.append(user)
    return paths


def _create(venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "_sagemaker_emulator_user_site.pth").write_text("\n".join(_user_site_paths()) + "\n")
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
LAYOUT = b"2"


def _requirements(source_dir: Path, requirements: Path | None) -> Path | None:
    """``requirements`` if given (SDK v3's ``SourceCode.requirements``), else the toolkit's
    ``<source_dir>/requirements.txt``; None when there is none."""
    req = requirements if requirements is not None else (
        source_dir / "requirements.txt" if source_dir.is_dir() else None)
    return req if req is not None and req.is_file() else None


def _key(req: Path) -> str:
    data = LAYOUT + req.read_bytes() + sys.prefix.encode() + sys.version.encode()
    return hashlib.sha256(data).hexdigest()[:16]


def interpreter(source_dir: Path, requirements: Path | None = None) -> str:
    """The interpreter a job whose source is ``source_dir`` runs with (reads only): this one, or
    the cached job environment's when there is a requirements file."""
    req = _requirements(source_dir, requirements)
    return sys.executable if req is None else str(CACHE / _key(req) / "bin" / "python")


def prepare(source_dir: Path, scratch: Path, log: Path, *, requirements: Path | None = None,
            env: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """Return ``(python, prepared)`` for a job whose source is ``source_dir``.

    Without a ``requirements.txt``: this interpreter, nothing to do. With one: the cached job
    environment's interpreter (:func:`interpreter`), installing the requirements first if needed
    (output to ``log``; pip runs with ``env``: the supervisor passes the hosts' environment, so
    nothing of the caller's reaches it; default: this process's).
    """
    req = _requirements(source_dir, requirements)
    if req is None:
        return sys.executable, True
    source_dir = req.parent
    key = _key(req)
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / key
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".ready").exists():
            return str(venv / "bin" / "python"), True
        shutil.rmtree(venv, ignore_errors=True)
        python = _create(venv)
        with open(log, "ab") as out:
            done = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                                   "-r", str(req)], stdout=out, stderr=subprocess.STDOUT,
                                  cwd=source_dir, timeout=PREPARE_TIMEOUT, check=False,
                                  env=None if env is None else dict(env))
        if done.returncode == 0:
            (venv / ".ready").touch()
            return str(python), True
        shutil.rmtree(venv, ignore_errors=True)
    throwaway = scratch / "jobenv"
    return str(_create(throwaway)), False
