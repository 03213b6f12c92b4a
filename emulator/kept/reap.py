"""``python -m emulator reap [JOB_DIR]``: remove kept hosts, and what emulator runs that are gone
left behind.

Kept hosts (``--keep-hosts``, see :mod:`emulator.kept.records`): with ``JOB_DIR``, that job's; without,
every kept job recorded in this machine's temp folder and every kept namespace agent whose emulator
is gone. Process backend otherwise: a job's hosts live in namespaces whose PID 1 (the namespace
agent) exits when its emulator does, so no process can be left; what can remain is a killed run's
temporary folders, removed here when their owner process is gone. Then each backend removes what
its runs whose emulator is gone left machine-wide (``Backend.reap_orphans``: kept namespace agents
without a record; docker: containers and networks labelled by an emulator process that no longer
exists, and helper containers — wheelhouse, image probe, image build — whose owner is gone).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from . import records as kept


def reap_temp() -> list[str]:
    """Remove ``sm-emulator-*`` temp folders whose ``owner`` file names a dead process (a kept
    job's folder stays: :func:`emulator.kept.records.reap` removes it with its hosts)."""
    out = []
    for path in Path(tempfile.gettempdir()).glob(f"{kept.SCRATCH_PREFIX}*"):
        pid = kept.owner_gone(path)
        if pid is not None and not (path / kept.RECORD).exists():
            shutil.rmtree(path, ignore_errors=True)
            out.append(f"removed {path} (owner pid {pid} is gone)")
    return out


def reap(job_dir: Path | str | None = None) -> list[str]:
    """Everything ``reap`` removed, one line each; with ``job_dir``, only that kept job
    (:class:`~emulator.errors.RequestError` when it is not one)."""
    if job_dir is not None:
        return kept.reap(job_dir)
    from ..backends import BACKENDS, get_backend

    lines = kept.reap()
    for name in BACKENDS:
        lines += get_backend(name).reap_orphans()
    return lines + reap_temp()
