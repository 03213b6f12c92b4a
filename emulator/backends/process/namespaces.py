"""Entering and listing one job's namespaces (process backend): what the backend that makes them
and the kept-host tools that come back to them later both need.

Only the standard library; nothing here starts a host.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

#: On the namespace agent's command line, followed by its emulator's ``PID:START``.
AGENT_OWNER_FLAG = "--owner"
#: On the namespace agent's command line, followed by the job's backend scratch folder: ``reap JOB_DIR``
#: finds a kept agent whose emulator was killed before it wrote the kept record (:mod:`emulator.kept.records`).
AGENT_SCRATCH_FLAG = "--scratch"


def namespace_pids(root: int) -> list[int]:
    """Machine-level PIDs of every process in the PID namespace of process ``root``."""
    try:
        target = os.readlink(f"/proc/{root}/ns/pid")
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == target:
                    out.append(int(entry))
            except OSError:
                continue
    return sorted(out)


def nsenter_argv(root: int, argv: Sequence[str], *, workdir: bool = False) -> list[str]:
    """An argv that runs ``argv`` in the namespaces of the host whose PID 1 is machine PID
    ``root``; as an ordinary user, in the job's user namespace too (as its uid 0; not ``--all``:
    the cgroup and time namespaces are this machine's, which a user namespace may not re-enter).
    ``workdir``: start in the cwd of ``root`` (the host's ``/opt/ml/code``), else in ``/``."""
    user = ["-U", "--preserve-credentials"] if os.geteuid() else []
    return ["nsenter", "-t", str(root), *user, "-n", "-u", "-m", "-p", "-i", *(["-w"] if workdir else []), *argv]
