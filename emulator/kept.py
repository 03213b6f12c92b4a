"""Kept hosts (``--keep-hosts``): the hosts still running when a job ends, kept for a post-mortem.

Which hosts: those whose PID 1 still runs when the supervisor would stop them — at
``MaxRuntimeInSeconds``, a stop request, Ctrl-C/SIGTERM of the emulator, or fail-fast (the peers
of the host that failed first). Hosts that exited are not kept (``shell`` says how they ended). A
job that completes keeps nothing; a spot interruption's hosts are replaced, never kept.

How: the stack capture runs first (the processes still answer), then, instead of SIGTERM, grace
and SIGKILL, every process of every kept host is **frozen** with SIGSTOP — exactly where it was:
no NCCL/gloo timeout fires, nothing more is logged, no CPU is used. ``gdb -p``, ``ps`` and
``/proc`` work on stopped processes, and ``py-spy dump --nonblocking`` (py-spy's default mode
suspends the process itself and refuses one that is already stopped); ``kill -CONT PID`` inside a
host lets one run on. Processes you start in a host (``python -m emulator shell``) are not frozen.

The job's status is what SageMaker reports (``Stopped``/``MaxRuntimeExceeded``, ``Stopped``,
``Failed`` with its ``FailureReason``): on SageMaker these hosts would be gone; only the emulator
keeps them (``job.json``: ``Emulator.KeptHosts``; each kept host's ``How`` is ``kept (frozen)``).

They live until ``python -m emulator reap JOB_DIR`` (or ``reap`` without arguments, which removes
every kept job found in this machine's temp folder and every kept namespace agent whose emulator is
gone); there is no timeout: frozen hosts cost memory, not CPU. A reboot or a restart of the docker
engine also ends them.

Backends:

- process: the job's namespace agent (PID 1 of the job's namespaces, :mod:`.backends.nsagent`)
  gets the ``keep`` op, after which it no longer exits when the emulator does. Killing the agent
  (``reap``) kills every host with it. A job that was not kept keeps the guarantee that nothing of
  it outlives its emulator.
- docker: the job's containers (running ones frozen, exited ones as they ended) and its network
  stay; ``reap`` removes them and hands root-written files back, as teardown would have.

The record, ``kept.json``, is written to the job folder and to the job's scratch folder (under
the temp folder, where ``reap`` finds it); the scratch folder (the hosts' ``/etc/hosts``, ssh keys,
diagnostics folder) stays with the hosts and goes with ``reap``.

A kill at any moment leaves nothing ``reap JOB_DIR`` cannot find: the scratch folder names its job
(:data:`JOB_FILE`, written before any host starts) and its emulator (``owner``), and the hosts name
the scratch folder (the namespace agent's ``--scratch`` argument, the containers' and network's
``sagemaker-emulator.scratch`` label). So when the emulator is SIGKILLed before it wrote the record
(or between the two copies), ``reap JOB_DIR`` still finds that job's scratch folders whose emulator
is gone and removes them with every agent or container below them (:func:`reap_leftovers`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RequestError
from .inhost import protocol as P
from .result import HostOutcome, iso
from .stacks import host_order as _host_order

if TYPE_CHECKING:
    from .backends.base import JobHandle

#: The record's file name, in the job folder and in the job's scratch folder.
RECORD = "kept.json"
#: Scratch trees are ``<temp>/sm-emulator-*`` (see :mod:`emulator.supervisor`).
SCRATCH_PREFIX = P.SCRATCH_PREFIX
#: In a scratch folder: the emulator that made it (``PID START``), and the job it is for (JSON:
#: ``job_dir``, ``job_name``, ``backend``); both written before any host starts (:func:`claim`).
OWNER_FILE = "owner"
JOB_FILE = "job"
#: How long ``reap`` waits for a killed agent's processes to go.
REAP_WAIT = 10.0
KEPT_HOW = "kept (frozen)"


@dataclass(frozen=True)
class KeptHostOutcome(HostOutcome):
    """A host that was kept: it has no exit status (it still exists, frozen)."""

    @property
    def how(self) -> str:
        return KEPT_HOW


@dataclass(frozen=True)
class KeptJob:
    """A kept job as its record describes it."""

    data: Mapping[str, Any]

    @property
    def job_dir(self) -> Path:
        return Path(self.data["job_dir"])

    @property
    def scratch(self) -> Path:
        return Path(self.data["scratch"])

    @property
    def backend(self) -> str:
        return str(self.data["backend"])

    @property
    def hosts(self) -> dict[str, dict[str, Any]]:
        """Kept host → the backend's facts about it."""
        return dict(self.data["hosts"])

    @property
    def exited(self) -> dict[str, str]:
        """Hosts of the job that had ended before the keep → how."""
        return dict(self.data.get("exited", {}))

    def host_problem(self, host: str) -> str | None:
        """Why ``host`` cannot be entered now, or None when it can."""
        if host not in self.hosts:
            all_hosts = sorted([*self.hosts, *self.exited], key=_host_order)
            if host in self.exited:
                return (f"{host} was not kept: it had ended before the job did ({self.exited[host]}); "
                        f"kept: {', '.join(sorted(self.hosts, key=_host_order))}")
            return f"{host} is not a host of job {self.data['job_name']} (hosts: {', '.join(all_hosts)})"
        facts = self.hosts[host]
        if self.backend == "process":
            agent = self.data.get("agent", {})
            if not P.pid_alive(int(agent.get("pid", 0)), agent.get("start_time")) or \
                    not P.pid_alive(int(facts["pid"]), facts.get("start_time")):
                return f"{host} has exited since it was kept (its PID 1, {facts['pid']} on this machine, is gone)"
            return None
        if self.backend == "docker":
            status = _container_status(str(facts["container"]))
            if status != "running":
                return f"{host} has exited since it was kept (container {facts['container']}: {status})"
            return None
        return f"{host}: the {self.backend} backend has no shell"


def keep(handle: JobHandle, *, job_dir: Path, scratch: Path, job_name: str, backend: str, reason: str,
         diag_dir: Path) -> KeptJob | None:
    """Freeze and hand off the hosts of ``handle`` that still run, write the record, and return
    it; None when no host ran any more (the caller then tears the job down as usual)."""
    try:
        facts = dict(handle.keep())
    except Exception as exc:  # e.g. the agent is gone (and its hosts with it): teardown follows
        print(f"[emulator] --keep-hosts: the hosts could not be kept ({exc}); they are stopped instead",
              file=sys.stderr)
        return None
    hosts = dict(facts.pop("hosts", {}))
    if not hosts:
        return None
    exited = {}
    for name, h in handle.hosts.items():
        if name not in hosts:
            ended = h.poll()
            exited[name] = ended.describe() if ended is not None else "not started"
    data = {"version": 1, "job_name": job_name, "job_dir": str(job_dir.resolve()), "backend": backend,
            "reason": reason, "kept_at": iso(time.time()), "frozen": True, "scratch": str(scratch),
            "diag_dir": str(diag_dir), "hosts": hosts, "exited": exited, **facts}
    kept = KeptJob(data)
    text = json.dumps(data, indent=1) + "\n"
    (scratch / RECORD).write_text(text)
    (job_dir / RECORD).write_text(text)
    return kept


def mark(hosts: Sequence[HostOutcome], kept: KeptJob | None) -> tuple[HostOutcome, ...]:
    """``hosts`` with each kept host's outcome saying so."""
    if kept is None:
        return tuple(hosts)
    return tuple(KeptHostOutcome(**{f.name: getattr(h, f.name) for f in dataclasses.fields(h)})
                 if h.name in kept.hosts else h for h in hosts)


def describe(kept: KeptJob | None) -> dict[str, Any]:
    """``job.json``'s ``Emulator.KeptHosts`` (nothing when no host was kept)."""
    if kept is None:
        return {}
    job = kept.job_dir
    return {"KeptHosts": {"Hosts": sorted(kept.hosts, key=_host_order), "Frozen": True,
                          "Record": str(job / RECORD), "Shell": f"python -m emulator shell {job} HOST [-- CMD]",
                          "Ps": f"python -m emulator ps {job}", "Reap": f"python -m emulator reap {job}"}}


def console(kept: KeptJob | None) -> list[str]:
    """The summary's lines: what was kept and how to enter, list and remove it."""
    if kept is None:
        return []
    job = _shown(kept.job_dir)
    first = sorted(kept.hosts, key=_host_order)[0]
    return [f"kept for post-mortem (frozen; SageMaker would have stopped them): "
            f"{', '.join(sorted(kept.hosts, key=_host_order))}",
            f"    enter:   python -m emulator shell {job} {first} [-- CMD]",
            f"    list:    python -m emulator ps {job}",
            f"    remove:  python -m emulator reap {job}"]


def claim(scratch: Path, *, job_dir: Path, job_name: str, backend: str) -> None:
    """Write what ties ``scratch`` to this emulator and to its job (read by :func:`reap_leftovers`
    and :func:`emulator.reap.reap_temp`), before anything of the job starts."""
    stat = P.proc_stat(os.getpid())
    (scratch / OWNER_FILE).write_text(f"{os.getpid()} {stat.start_time if stat else ''}".rstrip() + "\n")
    (scratch / JOB_FILE).write_text(json.dumps({"job_dir": str(job_dir.resolve()), "job_name": job_name,
                                                "backend": backend}) + "\n")


def owner_gone(scratch: Path) -> int | None:
    """The pid of the emulator that made ``scratch`` when that process is gone; None when it still
    runs or the folder names none."""
    try:
        words = (scratch / OWNER_FILE).read_text().split()
        pid = int(words[0])
        start = int(words[1]) if len(words) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    return None if P.pid_alive(pid, start) else pid


# -- finding kept jobs -----------------------------------------------------------------------------
def load(job_dir: Path | str) -> KeptJob:
    """The kept job of ``job_dir``; :class:`RequestError` (field ``JOB_DIR``) when there is none."""
    folder = Path(job_dir)
    if not folder.is_dir():
        raise RequestError("JOB_DIR", f"{folder} is not a folder (give the job's folder: <output dir>/<job name>)")
    record = folder / RECORD
    if not record.is_file():
        raise RequestError("JOB_DIR", f"{folder} is not a kept job: no {RECORD} ({_why_not_kept(folder)})")
    try:
        return KeptJob(json.loads(record.read_text()))
    except (OSError, ValueError) as exc:
        raise RequestError("JOB_DIR", f"{record} is not readable ({exc})") from None


def _why_not_kept(folder: Path) -> str:
    try:
        emulator = json.loads((folder / "job.json").read_text()).get("Emulator", {})
    except (OSError, ValueError):
        return "and no job.json: not a job folder, or the job still runs"
    if emulator.get("KeptHosts"):
        return f"its hosts {', '.join(emulator['KeptHosts']['Hosts'])} were kept and have been reaped"
    return "the job ran without --keep-hosts, or none of its hosts still ran when it ended"


def find_all() -> list[KeptJob]:
    """Every kept job whose record is in this machine's temp folder (the jobs' scratch trees)."""
    out = []
    for record in sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*/{RECORD}")):
        try:
            out.append(KeptJob(json.loads(record.read_text())))
        except (OSError, ValueError):
            continue
    return out


# -- removing them ---------------------------------------------------------------------------------
def reap_job(kept: KeptJob) -> list[str]:
    """Remove a kept job: its hosts (every process / container, and the network), its scratch tree
    and its records. The job folder (``job.json``, logs, ``hosts/`` trees) stays."""
    lines: list[str] = []
    if kept.backend == "process":
        agent = kept.data.get("agent", {})
        if _kill_agent(int(agent.get("pid", 0)), agent.get("start_time")):
            lines.append(f"killed the namespace agent of {kept.data['job_name']} (pid {agent['pid']}) "
                         f"and with it {', '.join(sorted(kept.hosts, key=_host_order))}")
    elif kept.backend == "docker":
        from .backends import docker

        owner = kept.data.get("owner")
        names = docker.remove_job(dict(kept.data.get("containers", {})).values(), str(kept.data.get("network")),
                                  owner=(int(owner[0]), int(owner[1])) if owner else None)
        if names:
            lines.append(f"removed {', '.join(names)}")
    if kept.scratch.name.startswith(SCRATCH_PREFIX) and kept.scratch.exists():
        shutil.rmtree(kept.scratch, ignore_errors=True)
    record = kept.job_dir / RECORD
    try:
        if json.loads(record.read_text()).get("scratch") == str(kept.scratch):
            record.unlink()
    except (OSError, ValueError):
        pass
    lines.append(f"reaped kept job {kept.data['job_name']} ({_shown(kept.job_dir)})")
    return lines


def reap(job_dir: Path | str | None = None) -> list[str]:
    """Remove the kept job of ``job_dir`` and whatever a killed run of that job left (see
    :func:`reap_leftovers`), or (None) every kept job this machine's temp folder records plus every
    kept namespace agent whose emulator is gone. One line per removal; :class:`RequestError` when
    ``job_dir`` has neither a record nor leftovers."""
    if job_dir is not None:
        lines = reap_job(load(job_dir)) if (Path(job_dir) / RECORD).is_file() else []
        lines += reap_leftovers(job_dir)
        if not lines:
            load(job_dir)  # raises: not a folder / not a kept job, and why
        return lines
    lines = []
    for kept in find_all():
        lines += reap_job(kept)
    return lines + reap_orphan_agents()


def reap_leftovers(job_dir: Path | str) -> list[str]:
    """Remove what runs of ``job_dir`` whose emulator is gone left in this machine's temp folder:
    each such scratch folder, a kept record found there (the emulator was killed between its two
    copies), and every namespace agent (process backend) or container and network (docker) that
    names the folder (the emulator was killed after it froze the hosts, before it wrote the record;
    or, on docker, at any moment). Scratch folders of a run that still goes on are left alone."""
    target = str(Path(job_dir).resolve())
    lines: list[str] = []
    for scratch in sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*")):
        try:
            job = json.loads((scratch / JOB_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(job, dict) or job.get("job_dir") != target:
            continue
        pid = owner_gone(scratch)
        if pid is None:
            continue
        if (scratch / RECORD).is_file():
            try:
                lines += reap_job(KeptJob(json.loads((scratch / RECORD).read_text())))
                continue
            except (OSError, ValueError, KeyError):
                pass
        for agent, start in _agents_below(scratch):
            if _kill_agent(agent, start):
                lines.append(f"killed the namespace agent {agent} of {job.get('job_name')} (its emulator, "
                             f"pid {pid}, is gone) and with it every host of that run")
        if job.get("backend") == "docker":
            try:
                from .backends import docker

                names = docker.reap_scratch(scratch)
            except Exception as exc:  # no docker SDK or engine here: say so, remove the rest
                lines.append(f"docker: containers of {job.get('job_name')} not reaped ({exc})")
            else:
                if names:
                    lines.append(f"removed {', '.join(names)}")
        shutil.rmtree(scratch, ignore_errors=True)
        lines.append(f"removed {scratch}, left by a run of {job.get('job_name')} (its emulator, pid {pid}, is gone)")
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
    from .backends.process import AGENT_SCRATCH_FLAG

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


def reap_orphan_agents() -> list[str]:
    """SIGKILL every namespace agent (process backend) whose emulator is gone: only kept agents
    outlive their emulator (the others exit with it), so these are kept jobs whose record is
    missing (another temp folder, or deleted)."""
    from .backends.process import AGENT_OWNER_FLAG

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


def _container_status(name: str) -> str:
    from .backends import docker

    try:
        return str(docker._client().containers.get(name).status)
    except Exception as exc:  # removed, or no engine
        return f"not found ({type(exc).__name__})"


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it is below it (shorter to type)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
