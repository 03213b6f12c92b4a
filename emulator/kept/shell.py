"""``python -m emulator shell|ps``: enter a kept host, list the processes of kept hosts.

``shell JOB_DIR HOST [-- CMD]`` runs CMD (default: an interactive shell, ``bash`` where the host
has it, else ``sh``) inside the kept host: on the process backend in its namespaces through
``nsenter`` (as root; as an ordinary user in the job's user namespace, as its uid 0, which is what
the host's processes run as), with the environment the host's PID 1 got (from
``launch-spec.json``; ``TERM`` added), in its working folder; on the docker backend through
``docker exec`` (the container's environment, user and working folder). Inside are the host's
hostname, network (``eth0``, ``/etc/hosts``), ``/opt/ml`` and processes (frozen: state ``T``).
The exit status is CMD's.

``ps JOB_DIR [HOST ...]`` lists every process of each kept host: its PID and parent PID as seen in
the host, state, ``RANK``/``LOCAL_RANK`` for ranks (their ``torch.distributed`` or Open MPI
variables, as the process saw them at start), its PID on this machine (for ``py-spy``/``gdb``
from outside) and command line. Read from this machine's ``/proc`` (docker: needs the engine on this
machine).

Every check is made before anything is entered: a folder that is not a kept job, an unknown host,
or a host that has exited is a :class:`~emulator.errors.RequestError` (exit status 2).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ..console import table
from ..diagnostics.stacks import HEADER
from ..errors import EmulatorError, RequestError
from ..inhost import protocol as P
from ..job.request import host_order
from . import records as kept_jobs

#: The default command: bash where the host has it (a user's image may not), else sh.
DEFAULT_SHELL = ("/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi")


def checked_host(job_dir: Path | str, host: str) -> kept_jobs.KeptJob:
    """The kept job of ``job_dir`` after checking that ``host`` of it can be entered now."""
    job = kept_jobs.load(job_dir)
    problem = job.host_problem(host)
    if problem is not None:
        raise RequestError("HOST", problem)
    return job


def shell_command(job_dir: Path | str, host: str, command: Sequence[str], *,
                  terminal: bool) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run ``command`` (empty: a shell) in kept ``host``;
    ``terminal``: allocate a terminal (docker) / pass ``TERM`` (process backend)."""
    job = checked_host(job_dir, host)
    command = list(command) or list(DEFAULT_SHELL)
    return job.backend_hosts.exec_argv(host, command, terminal=terminal, env=_launch_env(job, host))


def shell(job_dir: Path | str, host: str, command: Sequence[str]) -> NoReturn:
    """Replace this process with ``command`` run in kept ``host`` (see the module docstring)."""
    argv, env = shell_command(job_dir, host, command, terminal=sys.stdin.isatty() and sys.stdout.isatty())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        raise EmulatorError(f"could not run {argv[0]}: {exc}") from None


def _launch_env(job: kept_jobs.KeptJob, host: str) -> dict[str, str] | None:
    """The environment the host's PID 1 started with (the job's ``launch-spec.json``); None when
    that file does not describe ``host``."""
    try:
        spec = json.loads((job.job_dir / "launch-spec.json").read_text())
        return dict(next(h["environment"] for h in spec["hosts"] if h["name"] == host))
    except (OSError, ValueError, KeyError, StopIteration):
        return None


# -- ps -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostProcess:
    """One process of a kept host."""

    pid: int  # as seen in the host
    ppid: int  # as seen in the host (0: outside it)
    state: str  # /proc state letter: T = stopped (frozen)
    rank: str | None
    local_rank: str | None
    machine_pid: int
    command: str


def processes(job_dir: Path | str, hosts: Sequence[str] = ()) -> dict[str, list[HostProcess] | str]:
    """Per kept host (all, or ``hosts``): its processes, or why there are none (it has exited)."""
    job = kept_jobs.load(job_dir)
    for host in hosts:
        if host not in job.hosts:
            raise RequestError("HOST", job.host_problem(host) or host)
    out: dict[str, list[HostProcess] | str] = {}
    for host in sorted(hosts or job.hosts, key=host_order):
        problem = job.host_problem(host)
        out[host] = problem if problem is not None else _host_processes(job, host)
    if all(isinstance(v, str) for v in out.values()):
        raise RequestError("JOB_DIR", f"no kept host of {job.data['job_name']} runs any more: "
                           + "; ".join(str(v) for v in out.values()))
    return out


def _host_processes(job: kept_jobs.KeptJob, host: str) -> list[HostProcess]:
    machine = job.backend_hosts.pids(host)
    inner = {pid: (P.proc_nspids(pid) or [0])[-1] for pid in machine}
    diag = Path(job.data.get("diag_dir", ""))
    rows = []
    for pid in machine:
        stat = P.proc_stat(pid)
        if stat is None:
            continue
        rank, local = _rank(pid, diag / f"{P.STACKS_PREFIX}{host}-{inner[pid]}.txt")
        rows.append(HostProcess(inner[pid], inner.get(stat.ppid, 0), stat.state, rank, local, pid,
                                " ".join(P.proc_cmdline(pid)) or f"[{_comm(pid)}]"))
    return sorted(rows, key=lambda r: r.pid)


def _rank(machine_pid: int, stacks_file: Path) -> tuple[str | None, str | None]:
    """RANK/LOCAL_RANK as the process saw them at start: the header of its stacks file (written by
    the process itself, readable where its environment is not), else its environment."""
    try:
        with open(stacks_file) as f:
            found = HEADER.match(f.readline())
        if found and found.group(3) != "-":
            return found.group(3), found.group(4) if found.group(4) != "-" else None
    except OSError:
        pass
    env = P.proc_environ(machine_pid)
    for rank, local in zip(P.RANK_VARIABLES, P.LOCAL_RANK_VARIABLES):
        if rank in env:
            return env[rank], env.get(local)
    return None, None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def ps_text(job_dir: Path | str, hosts: Sequence[str] = ()) -> str:
    """What ``python -m emulator ps`` prints."""
    job = kept_jobs.load(job_dir)
    found = processes(job_dir, hosts)
    status = _status(job)
    lines = [f"{job.data['job_name']} ({job.backend} backend): {status}; hosts kept {job.data['kept_at']} "
             f"({job.data['reason']}), frozen (state T)"]
    for host, rows in found.items():
        lines.append("")
        if isinstance(rows, str):
            lines.append(f"{host}: {rows}")
            continue
        lines.append(f"{host}:")
        lines.append(table(["PID", "PPID", "STATE", "RANK", "LOCAL_RANK", "MACHINE PID", "COMMAND"],
                           [(r.pid, r.ppid, r.state, r.rank or "", r.local_rank or "", r.machine_pid, r.command)
                            for r in rows]))
    for host, how in sorted(job.exited.items(), key=lambda kv: host_order(kv[0])):
        if not hosts:
            lines.append(f"\n{host}: not kept (it had ended before the job did: {how})")
    return "\n".join(lines)


def _status(job: kept_jobs.KeptJob) -> str:
    try:
        d = json.loads((job.job_dir / "job.json").read_text())
        return f"{d['TrainingJobStatus']} ({d['SecondaryStatus']})"
    except (OSError, ValueError, KeyError):
        return "status not written yet"


def list_kept() -> str:
    """What ``python -m emulator ps`` without a job prints: the kept jobs this machine records."""
    jobs = kept_jobs.find_all()
    if not jobs:
        return "no kept jobs (in this machine's temp folder)"
    return table(["JOB DIR", "BACKEND", "KEPT HOSTS", "KEPT AT"],
                 [(str(j.job_dir), j.backend, ", ".join(sorted(j.hosts, key=host_order)), j.data["kept_at"])
                  for j in jobs])
