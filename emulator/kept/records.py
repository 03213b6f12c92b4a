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

Backends (each finds its kept hosts again through ``Backend.attach``, see
:class:`emulator.backends.base.KeptHosts`; :mod:`.backends.process_kept`, :mod:`.backends.docker_kept`):

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
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import RequestError
from ..inhost import protocol as P
from ..job.request import host_order as _host_order
from ..job.result import HostOutcome, iso

if TYPE_CHECKING:
    from ..backends.base import JobHandle, KeptHosts

#: The record's file name, in the job folder and in the job's scratch folder.
RECORD = "kept.json"
#: Scratch trees are ``<temp>/sm-emulator-*`` (see :mod:`emulator.supervisor`).
SCRATCH_PREFIX = P.SCRATCH_PREFIX
#: In a scratch folder: the emulator that made it (``PID START``), and the job it is for (JSON:
#: ``job_dir``, ``job_name``, ``backend``); both written before any host starts (:func:`claim`).
OWNER_FILE = "owner"
JOB_FILE = "job"
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

    @functools.cached_property
    def backend_hosts(self) -> KeptHosts:
        """The kept hosts as their backend finds them again (enter, list, remove)."""
        from ..backends import get_backend

        return get_backend(self.backend).attach(self.data)

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
        try:
            return self.backend_hosts.gone(host)
        except RequestError:  # a backend this emulator does not know
            return f"{host}: the {self.backend} backend is not known here"


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
    and :func:`emulator.kept.reap.reap_temp`), before anything of the job starts."""
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
    try:
        lines = kept.backend_hosts.remove()
    except RequestError:  # a backend this emulator does not know: only its records go
        lines = []
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
    :func:`reap_leftovers`), or (None) every kept job this machine's temp folder records (what each
    backend left machine-wide is :func:`emulator.kept.reap.reap`'s). One line per removal;
    :class:`RequestError` when ``job_dir`` has neither a record nor leftovers."""
    if job_dir is not None:
        lines = reap_job(load(job_dir)) if (Path(job_dir) / RECORD).is_file() else []
        lines += reap_leftovers(job_dir)
        if not lines:
            load(job_dir)  # raises: not a folder / not a kept job, and why
        return lines
    lines = []
    for kept in find_all():
        lines += reap_job(kept)
    return lines


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
        from ..backends import get_backend

        try:
            backend = get_backend(str(job.get("backend")))
        except RequestError:  # a backend this emulator does not know: only the folder goes
            pass
        else:
            lines += backend.reap_leftovers(scratch, job_name=str(job.get("job_name")), owner_pid=pid)
        shutil.rmtree(scratch, ignore_errors=True)
        lines.append(f"removed {scratch}, left by a run of {job.get('job_name')} (its emulator, pid {pid}, is gone)")
    return lines


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it is below it (shorter to type)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
