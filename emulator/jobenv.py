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
import sysconfig
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sagemaker-emulator" / "envs"
#: How long preparing one job environment may take.
PREPARE_TIMEOUT = 1800


def train_script() -> Path:
    """The ``train`` console script of the sagemaker-training toolkit installed here."""
    return Path(sysconfig.get_path("scripts")) / "train"


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
    # --- sdk3 prototype (lead: fold into the rewrite): as in a DLC, `pip` and `torchrun` next to
    # `python3` run this interpreter (SDK v3's sm_train.sh needs `command -v pip`; its drivers run
    # `torchrun` from PATH, whose ranks must see what the requirements installed).
    for name, module in (("pip", "pip"), ("pip3", "pip"), ("torchrun", "torch.distributed.run")):
        script = venv / "bin" / name
        script.write_text(f"#!{python}\nimport runpy, sys\nsys.argv[0] = {name!r}\n"
                          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
        script.chmod(0o755)
    # --- end sdk3 prototype
    return python


def prepare(source_dir: Path, scratch: Path, log: Path, requirements: Path | None = None) -> tuple[str, bool]:
    """Return ``(python, prepared)`` for a job whose source is ``source_dir``.

    Without a ``requirements.txt``: this interpreter, nothing to do. With one: the cached job
    environment's interpreter, installing the requirements first if needed (output to ``log``).
    """
    req = source_dir / "requirements.txt" if source_dir.is_dir() else None
    if requirements is not None:  # --- sdk3 prototype: SDK v3's SourceCode.requirements (code channel)
        req, source_dir = requirements, requirements.parent
    if req is None or not req.is_file():
        return sys.executable, True
    key = hashlib.sha256(req.read_bytes() + sys.prefix.encode() + sys.version.encode()).hexdigest()[:16]
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
                                  cwd=source_dir, timeout=PREPARE_TIMEOUT, check=False)
        if done.returncode == 0:
            (venv / ".ready").touch()
            return str(python), True
        shutil.rmtree(venv, ignore_errors=True)
    throwaway = scratch / "jobenv"
    return str(_create(throwaway)), False
