"""The process backend with fast rank start switched on, for measuring it.

``emulator/inhost/site/sitecustomize.py`` belongs to the in-host code; until it carries the
fast-start hook, the benchmark runs hosts from a copy of ``emulator/inhost`` whose
``sitecustomize`` has the hook appended (exactly the lines documented in
``_sm_emulator_faststart``). Jobs must also set ``EMULATOR_FAST_START=1`` in their environment.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from emulator.backends.process import ProcessBackend

HOOK = """
if os.environ.get("EMULATOR_INHOST") == "1" and os.environ.get("EMULATOR_FAST_START") == "1":
    import _sm_emulator_faststart
    _sm_emulator_faststart.activate()
"""


def overlay(dest: Path) -> Path:
    """Copy ``emulator/inhost`` to ``dest`` and add the fast-start hook (if not there yet)."""
    src = Path(ProcessBackend.inhost_root)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    site = dest / "site" / "sitecustomize.py"
    text = site.read_text()
    if "_sm_emulator_faststart" not in text:
        site.write_text(text + HOOK)
    return dest


def fast_backend(dest: Path, *, preload: str = "torch") -> ProcessBackend:
    """A :class:`ProcessBackend` whose hosts use the overlay at ``dest``."""
    del preload  # chosen by the job's EMULATOR_FAST_START_PRELOAD
    backend = ProcessBackend()
    backend.inhost_root = str(overlay(dest))  # type: ignore[misc]
    return backend
