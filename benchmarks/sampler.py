"""Sample the CPU time and memory of every descendant of one process while a job runs.

Reads ``/proc/<pid>/stat`` and ``/proc/<pid>/statm`` (cheap; no ``smaps``) every
``interval`` seconds for the whole process tree below ``root``. Hosts of the process backend are
descendants of the emulator (through ``unshare`` → namespace agent → ``bwrap``), so one tree
covers the whole job. Reported:

* ``peak_rss_mb``: the largest sum of RSS over the tree at one sample (counts pages shared
  between processes — e.g. torch's libraries — once per process, so it overstates);
* ``peak_private_mb``: the largest sum of (RSS − shared) at one sample, plus the largest shared
  figure of a single process: a closer estimate of what the job really holds;
* ``rank_peak_rss_mb``: the largest RSS of one rank (a process whose command line names the
  workload script, or a child of a fast-start zygote);
* ``cpu_s``: the sum over all processes seen of their last sampled ``utime+stime`` (misses at
  most ``interval`` of each process's last moments; the worker's ``RUSAGE_CHILDREN`` is exact).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024


@dataclass
class _Proc:
    ppid: int
    cpu: float
    rss: int
    shared: int
    cmd: str


def _read(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        with open(f"/proc/{pid}/statm") as f:
            statm = f.read().split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    rest = stat.rsplit(")", 1)[1].split()
    return _Proc(ppid=int(rest[1]), cpu=(int(rest[11]) + int(rest[12])) / TICK,
                 rss=int(statm[1]) * PAGE, shared=int(statm[2]) * PAGE, cmd=cmd)


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
    _cpu: dict[tuple[int, str], float] = field(default_factory=dict)
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
            self._cpu[(pid, p.cmd[:200])] = p.cpu
            is_rank = (self.rank_marker and self.rank_marker in p.cmd) or (
                p.ppid in zygotes and pid not in zygotes)
            if is_rank:
                self.rank_peak_rss = max(self.rank_peak_rss, p.rss)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_private = max(self.peak_private, private + shared)
        self.max_procs = max(self.max_procs, len(tree))
        self.samples += 1

    def result(self) -> dict[str, float | int]:
        """The figures described in the module docstring."""
        return {"peak_rss_mb": round(self.peak_rss / MB, 1),
                "peak_private_mb": round(self.peak_private / MB, 1),
                "rank_peak_rss_mb": round(self.rank_peak_rss / MB, 1),
                "sampled_cpu_s": round(sum(self._cpu.values()), 2),
                "max_procs": self.max_procs, "samples": self.samples}
