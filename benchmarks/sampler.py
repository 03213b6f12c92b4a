"""Sample the CPU time and memory of every descendant of one process while a job runs.

Reads ``/proc/<pid>/stat``, ``/proc/<pid>/statm`` and ``/proc/<pid>/cmdline`` (cheap; no
``smaps``) every ``interval`` seconds for the whole process tree below ``root`` (the benchmark's
worker, i.e. the emulator). Hosts of the process backend are descendants of the emulator (through
``unshare`` → namespace agent → ``unshare``/``bwrap``), so one tree covers the whole job. Reported:

* ``peak_rss_mb``: the largest sum of RSS over the tree at one sample (counts pages shared
  between processes — e.g. torch's libraries — once per process, so it overstates);
* ``peak_private_mb``: the largest sum of (RSS − shared) at one sample, plus the largest shared
  figure of a single process: a closer estimate of what the job really holds;
* ``rank_peak_rss_mb``: the largest RSS of one rank (a process whose command line names the
  workload script, or a child of a fast-start zygote);
* ``sampled_cpu_s``: the sum over all processes seen of their last sampled ``utime+stime``
  (misses at most ``interval`` of each process's last moments; the worker's ``RUSAGE_CHILDREN``
  is exact);
* ``helpers_cpu_s``: the CPU of the emulator's helper programs, which belongs to the emulator's
  own cost rather than to the hosts: every process whose program is one of :data:`HELPERS`
  (``unshare``, ``bwrap``, ``ip``, ``nsenter``) or the namespace agent (:data:`AGENT`), counted by
  its own ``utime+stime`` (a process that ``exec``\\ s is classified by its last program, so a
  host's PID 1, which starts as ``bwrap``, counts as the host's); plus the children of the
  emulator and of those helpers that started and ended between two samples (``ip`` and
  ``nsenter … ip`` wiring each host's ``eth0``, the ``unshare`` probe, ``ssh-keygen``): the growth
  of their parent's ``cutime+cstime`` over an interval in which none of its children seen before
  was reaped. An interval in which a seen child was reaped (a host, a ``bwrap``, ``orted``) is
  left out, because its figure includes the hosts' own work.

Not measured: the CPU a helper spends after its last sample, and the docker engine's work for
the docker backend (``dockerd`` and the containers are not descendants of the emulator).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024
#: Programs the emulator runs to build and wire its hosts (process backend).
HELPERS = frozenset({"unshare", "bwrap", "ip", "nsenter"})
#: The namespace agent's script (``python -S … emulator/backends/process/nsagent.py``).
AGENT = "nsagent.py"


@dataclass
class _Proc:
    ppid: int
    start: int  # clock ticks since boot: tells a reused pid apart
    cpu: float  # utime + stime, seconds
    children_cpu: float  # cutime + cstime (reaped children), seconds
    rss: int
    shared: int
    argv: list[str]

    @property
    def cmd(self) -> str:
        return " ".join(self.argv)


def _read(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/statm") as f:
            statm = f.read().split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[1].split()
    return _Proc(ppid=int(rest[1]), start=int(rest[19]), cpu=(int(rest[11]) + int(rest[12])) / TICK,
                 children_cpu=(int(rest[13]) + int(rest[14])) / TICK,
                 rss=int(statm[1]) * PAGE, shared=int(statm[2]) * PAGE, argv=argv)


def is_helper(argv: list[str]) -> bool:
    """True for a helper program of the emulator (see the module docstring)."""
    if not argv:
        return False
    return os.path.basename(argv[0]) in HELPERS or any(os.path.basename(a) == AGENT for a in argv[:8])


@dataclass
class Sampler:
    """Background sampler of the tree below ``root``; use as a context manager."""

    root: int
    rank_marker: str = ""
    interval: float = 0.25
    peak_rss: int = 0
    peak_private: int = 0
    rank_peak_rss: int = 0
    max_procs: int = 0
    samples: int = 0
    #: (pid, start) → last sampled utime+stime, and whether its last known program is a helper.
    _cpu: dict[tuple[int, int], float] = field(default_factory=dict)
    _helper: dict[tuple[int, int], bool] = field(default_factory=dict)
    #: Parents whose unseen children count as helpers: (pid, start) → (cutime+cstime, children seen).
    _parents: dict[tuple[int, int], tuple[float, frozenset[tuple[int, int]]]] = field(default_factory=dict)
    _unseen_children_cpu: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        """Take one sample of the whole tree."""
        procs: dict[int, _Proc] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                p = _read(int(entry))
                if p is not None:
                    procs[int(entry)] = p
        children: dict[int, list[int]] = {}
        for pid, p in procs.items():
            children.setdefault(p.ppid, []).append(pid)
        tree, todo = [], list(children.get(self.root, []))
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        zygotes = {pid for pid in tree if "_sm_emulator_faststart" in procs[pid].cmd}
        rss = private = shared = 0
        for pid in tree:
            p = procs[pid]
            rss += p.rss
            private += p.rss - p.shared
            shared = max(shared, p.shared)
            key = (pid, p.start)
            self._cpu[key] = p.cpu
            if p.argv:  # a zombie has no command line: keep what it was
                self._helper[key] = is_helper(p.argv)
            is_rank = (self.rank_marker and self.rank_marker in p.cmd) or (
                p.ppid in zygotes and pid not in zygotes)
            if is_rank:
                self.rank_peak_rss = max(self.rank_peak_rss, p.rss)
        self._count_unseen_children(procs, children, [self.root, *tree])
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_private = max(self.peak_private, private + shared)
        self.max_procs = max(self.max_procs, len(tree))
        self.samples += 1

    def _count_unseen_children(self, procs: dict[int, _Proc], children: dict[int, list[int]],
                               pids: list[int]) -> None:
        """Add the CPU of helpers' children that lived and died between two samples."""
        for pid in pids:
            p = procs.get(pid)
            if p is None or not (pid == self.root or self._helper.get((pid, p.start))):
                continue
            key = (pid, p.start)
            kids = frozenset((c, procs[c].start) for c in children.get(pid, []))
            # A helper seen for the first time counts from zero (the agent wires its bridge at
            # once); the root's children before the first sample are not this job's.
            first = (p.children_cpu, kids) if pid == self.root else (0.0, frozenset())
            before_cpu, before_kids = self._parents.get(key, first)
            if before_kids <= kids:  # no child seen before was reaped: the growth is unseen children
                self._unseen_children_cpu += max(0.0, p.children_cpu - before_cpu)
            self._parents[key] = (p.children_cpu, kids)

    def result(self) -> dict[str, float | int]:
        """The figures described in the module docstring."""
        helpers = sum(cpu for key, cpu in self._cpu.items() if self._helper.get(key))
        return {"peak_rss_mb": round(self.peak_rss / MB, 1),
                "peak_private_mb": round(self.peak_private / MB, 1),
                "rank_peak_rss_mb": round(self.rank_peak_rss / MB, 1),
                "sampled_cpu_s": round(sum(self._cpu.values()), 2),
                "helpers_cpu_s": round(helpers + self._unseen_children_cpu, 3),
                "max_procs": self.max_procs, "samples": self.samples}
