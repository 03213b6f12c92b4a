"""Kept hosts of the process backend, and what killed runs of it left (see :mod:`emulator.kept.records`).

A kept job's hosts live in the namespaces of its namespace agent (:mod:`.nsagent`), which the
``keep`` op handed off so that it outlives its emulator. The kept record names the agent and each
kept host's PID 1 by machine PID and start time (a reused PID is never mistaken for them).
Entering a host is ``nsenter`` into its namespaces (:func:`~.namespaces.nsenter_argv`), with the
environment its PID 1 started with; its processes are those of its PID namespace; removing the
job is a SIGKILL of the agent, which takes every host with it.

Agents are found again by their command line: ``--scratch DIR`` names the run's scratch folder,
``--owner PID:START`` the emulator that started them (see :mod:`.process`).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import RequestError
from ...inhost import protocol as P
from ...job.request import host_order
from .namespaces import AGENT_OWNER_FLAG, AGENT_SCRATCH_FLAG, namespace_pids, nsenter_argv

#: How long a reap waits for a killed agent's processes to go.
REAP_WAIT = 10.0


class ProcessKeptHosts:
    """The kept hosts a process-backend ``kept.json`` describes (see :class:`~.base.KeptHosts`)."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.record = record
        self.agent = dict(record.get("agent", {}))
        self.hosts: dict[str, dict[str, Any]] = dict(record.get("hosts", {}))

    def gone(self, host: str) -> str | None:
        facts = self.hosts[host]
        if not P.pid_alive(int(self.agent.get("pid", 0)), self.agent.get("start_time")) or \
                not P.pid_alive(int(facts["pid"]), facts.get("start_time")):
            return f"{host} has exited since it was kept (its PID 1, {facts['pid']} on this machine, is gone)"
        return None

    def exec_argv(self, host: str, command: Sequence[str], *, terminal: bool,
                  env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
        if env is None:
            raise RequestError("JOB_DIR", f"{self.record.get('job_dir')}/launch-spec.json does not describe {host}")
        out = dict(env)
        if terminal and os.environ.get("TERM"):
            out["TERM"] = os.environ["TERM"]
        argv = nsenter_argv(int(self.hosts[host]["pid"]), command, workdir=True)
        return [shutil.which(argv[0]) or argv[0], *argv[1:]], out

    def pids(self, host: str) -> list[int]:
        return namespace_pids(int(self.hosts[host]["pid"]))

    def remove(self) -> list[str]:
        if _kill_agent(int(self.agent.get("pid", 0)), self.agent.get("start_time")):
            return [f"killed the namespace agent of {self.record.get('job_name')} (pid {self.agent['pid']}) "
                    f"and with it {', '.join(sorted(self.hosts, key=host_order))}"]
        return []


def reap_agents_below(scratch: Path, *, job_name: str, owner_pid: int) -> list[str]:
    """SIGKILL every namespace agent whose scratch folder is ``scratch`` or below it (a run of
    ``job_name`` whose emulator, ``owner_pid``, is gone), and with it every host of that run."""
    lines = []
    for agent, start in _agents_below(scratch):
        if _kill_agent(agent, start):
            lines.append(f"killed the namespace agent {agent} of {job_name} (its emulator, "
                         f"pid {owner_pid}, is gone) and with it every host of that run")
    return lines


def reap_orphan_agents() -> list[str]:
    """SIGKILL every namespace agent whose emulator is gone: only kept agents outlive their
    emulator (the others exit with it), so these are kept jobs whose record is missing (another
    temp folder, or deleted)."""
    lines = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        args = _agent_args(int(entry))
        if args is None or AGENT_OWNER_FLAG not in args:
            continue
        pid, _, start = args[AGENT_OWNER_FLAG].partition(":")
        if pid.isdigit() and not P.pid_alive(int(pid), int(start) if start.isdigit() else None):
            stat = P.proc_stat(int(entry))
            if stat is not None and _kill_agent(int(entry), stat.start_time):
                lines.append(f"killed namespace agent {entry} (its emulator, pid {pid}, is gone) and its hosts")
    return lines


def _agent_args(pid: int) -> dict[str, str] | None:
    """The ``--flag value`` arguments of namespace agent ``pid`` (not of its ``unshare``); None
    when ``pid`` is no agent."""
    argv = P.proc_cmdline(pid)  # [python, -S, -E, -s, .../nsagent.py, --scratch, DIR, --owner, PID:START]
    script = next((i for i, a in enumerate(argv) if a.endswith("nsagent.py")), None)
    if script is None or not argv or os.path.basename(argv[0]) == "unshare":
        return None
    rest = argv[script + 1:]
    return {rest[i]: rest[i + 1] for i in range(0, len(rest) - 1, 2)}


def _agents_below(scratch: Path) -> list[tuple[int, int]]:
    """(pid, start time) of every namespace agent whose scratch folder is ``scratch`` or below it."""
    root = str(scratch).rstrip("/") + "/"
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            args = _agent_args(int(entry))
            if args is not None and (args.get(AGENT_SCRATCH_FLAG, "") + "/").startswith(root):
                stat = P.proc_stat(int(entry))
                if stat is not None:
                    out.append((int(entry), stat.start_time))
    return out


def _kill_agent(pid: int, start_time: int | None) -> bool:
    """SIGKILL a namespace agent (and with it every host of its job): its ``unshare`` parent first
    (``--kill-child`` takes the agent with it), so that ``unshare`` does not complain on the
    terminal of the emulator that started it; then the agent itself."""
    stat = P.proc_stat(pid) if pid > 0 and P.pid_alive(pid, start_time) else None
    if stat is None:
        return False
    parent = P.proc_stat(stat.ppid)
    if parent is not None and os.path.basename((P.proc_cmdline(stat.ppid) or [""])[0]) == "unshare":
        _kill(stat.ppid, parent.start_time)
    _kill(pid, start_time)
    return True


def _kill(pid: int, start_time: int | None) -> bool:
    """SIGKILL ``pid`` if it is still the process that started at ``start_time``; wait until it
    is gone. True when it was killed."""
    if pid <= 0 or not P.pid_alive(pid, start_time):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + REAP_WAIT
    while time.monotonic() < deadline:
        stat = P.proc_stat(pid)
        if stat is None or stat.start_time != start_time or stat.state in ("Z", "X"):
            break
        time.sleep(0.05)
    return True
