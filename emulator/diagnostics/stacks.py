"""Where every rank was when the job was stopped: Python stacks of all threads, per process.

Mechanisms (chosen per process, the first that answers):

- ``faulthandler`` (always): every Python process of a host registers ``faulthandler`` on
  :data:`~emulator.inhost.protocol.STACKS_SIGNAL` at interpreter start (in-host
  ``_sm_emulator_stacks``: one fd, one write, one ``sigaction``; nothing while it runs). Before the
  supervisor stops hosts, :class:`StackCapture` sends that signal to every process that (a) wrote
  a stacks file in the diagnostics folder and (b) shows the handler in ``/proc/<pid>/status``
  ``SigCgt``, so a process that did not register never gets it (its default action would kill
  it). The C handler writes all threads' stacks even while the thread holds the GIL in a blocking
  C call (a gloo ``all_reduce``); it costs the rank well under a millisecond. It cannot answer
  while the process is stopped (``freeze`` fault) or has the signal blocked.
- ``py-spy dump`` (when ``py-spy`` is on this machine's ``PATH`` and may read the process: root,
  or the same user): for processes that did not answer in time, or that never registered (a
  Python started with ``-S``/``-I``). It reads the process's memory from outside, so it works on
  a stopped process too; it costs ~0.1-0.5 s of the supervisor's time per process and does not
  pause the target (``--nonblocking``).

Signals are sent from this machine (``os.kill`` on the machine-level PIDs the backend reports);
where that is not permitted (the docker engine's containers run as root, the emulator does not)
``kill`` runs inside the host through :meth:`JobHandle.exec_argv`. Capturing waits at most
``timeout`` seconds (default 2) before the supervisor's SIGTERM; a rank that did not answer is
reported as such. Nothing happens (and nothing is paid) when a job is not stopped.

The summary names, per rank, the host, the innermost frame of the user's code (not the standard
library, not site-/dist-packages, not the emulator's in-host code) and the ``torch.distributed``
call it is blocked in, and groups ranks that are at the same place::

    ranks 0-2 (algo-1, algo-2): all_reduce at train.py:16 in step; rank 3 (algo-2): train.py:11 in load_batch

The full stacks go to ``<job dir>/stacks/<host>.txt`` and are appended to each host's log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache import cache_dir
from ..inhost.protocol import (
    CODE_DIR,
    RANK_VARIABLES,
    STACKS_PREFIX,
    STACKS_SIGNAL,
    proc_caught_signals,
    proc_cmdline,
    proc_environ,
    proc_nspids,
    proc_stat,
)
from ..job.request import host_order
from ..observers import AttemptContext, FinishContext, Observer, Report, StopReason

if TYPE_CHECKING:
    from ..backends.base import JobHandle

#: Seconds the capture waits for every process to answer (then the supervisor stops the job).
DEFAULT_TIMEOUT = 2.0
#: Wait this long after a file stops growing before calling its dump complete.
SETTLE = 0.06
#: Reasons the capture runs for (a spot interruption restarts the job: nothing to debug).
CAPTURE_REASONS = frozenset({StopReason.FAIL_FAST, StopReason.MAX_RUNTIME, StopReason.STOP_REQUEST,
                             StopReason.INTERRUPT, StopReason.DIAGNOSIS})
HEADER = re.compile(r"^# sm-emulator-stacks pid=(\d+) main=(0x[0-9a-f]+) rank=(\S+) local=(\S+)(?: start=([\d.]+))?",
                    re.MULTILINE)
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[[^\]]*\])? \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_SPY_THREAD = re.compile(r'^Thread (0x[0-9A-Fa-f]+|\d+) \((\w+)\)(?:: "(.*)")?')
_SPY_FRAME = re.compile(r"^\s+(.+?) \((.+):(\d+)\)$")
#: torch.distributed functions that are not the call a user made (wrappers, helpers).
_GENERIC = frozenset({"wrapper", "_wrapper", "inner", "wrapped", "_fn", "fn", "__call__", "wait", "_bind",
                      "_check_op", "_refuse", "_check_barrier"})


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def short(self) -> str:
        return f"{display_path(self.file)}:{self.line} in {self.function}"


@dataclass(frozen=True)
class Thread:
    ident: str
    frames: tuple[Frame, ...]  # innermost first
    current: bool = False
    name: str | None = None


@dataclass
class ProcessStack:
    """One process's answer (or its silence)."""

    host: str
    pid: int  # inside the host
    machine_pid: int
    rank: int | None
    argv: list[str]
    main: str | None = None  # main thread id (faulthandler's format)
    threads: list[Thread] = field(default_factory=list)
    mechanism: str | None = None  # faulthandler | py-spy | None (no answer)
    problem: str | None = None  # why there is no stack
    raw: str = ""
    parent_rank: int | None = None  # the rank of its parent process (DataLoader workers)

    @property
    def main_thread(self) -> Thread | None:
        for t in self.threads:
            if self.main is not None and int(t.ident, 16) == int(self.main, 16):
                return t
        for t in self.threads:  # py-spy: the thread named MainThread; else the one that runs <module>
            if t.name == "MainThread" or (t.frames and t.frames[-1].function == "<module>"):
                return t
        return self.threads[0] if self.threads else None


# -- parsing ------------------------------------------------------------------------------------
def parse_faulthandler(text: str) -> list[Thread]:
    """Threads of the last faulthandler dump in ``text`` (all threads, innermost frame first)."""
    threads: list[Thread] = []
    current: tuple[str, bool] | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            if current is not None:
                threads.append(Thread(current[0], tuple(frames), current[1]))
            current, frames = (m.group(2), m.group(1) == "Current thread"), []
            continue
        f = _FH_FRAME.match(line)
        if f and current is not None:
            frames.append(Frame(f.group(1), int(f.group(2)), f.group(3)))
    if current is not None:
        threads.append(Thread(current[0], tuple(frames), current[1]))
    return threads


def parse_py_spy(text: str) -> list[Thread]:
    """Threads of a ``py-spy dump`` output (innermost frame first, as py-spy prints them)."""
    threads: list[Thread] = []
    ident: str | None = None
    name: str | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        m = _SPY_THREAD.match(line)
        if m:
            if ident is not None:
                threads.append(Thread(ident, tuple(frames), name=name))
            ident, name, frames = m.group(1), m.group(3), []
            continue
        f = _SPY_FRAME.match(line)
        if f and ident is not None:
            frames.append(Frame(f.group(2), int(f.group(3)), f.group(1)))
    if ident is not None:
        threads.append(Thread(ident, tuple(frames), name=name))
    return threads


# -- classifying frames -------------------------------------------------------------------------
#: Installed packages are also reached through the emulator's cache: a process-backend job sees
#: them in its DLC view and job environment (``cache_dir()``), at the path they have on this machine.
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python\d+(\.\d+)?/|^<frozen |^<string>$|/inhost/(smddp/)?site/|"
                      r"/sm-emulator/inhost/|/_sm_emulator_[^/]*\.py$|/sagemaker_training/|"
                      f"^{re.escape(str(cache_dir()))}/")


def is_user_frame(frame: Frame) -> bool:
    """True for the user's own code: not the standard library, installed packages (also through
    the emulator's cache), the toolkit or the emulator's in-host code."""
    return _LIBRARY.search(frame.file) is None


def display_path(path: str) -> str:
    """``train.py`` for ``/opt/ml/code/train.py``; other paths by file name."""
    prefix = CODE_DIR + "/"
    return path[len(prefix):] if path.startswith(prefix) else os.path.basename(path)


def _is_dist(frame: Frame) -> bool:
    return "/torch/distributed/" in frame.file or "/smdistributed/" in frame.file or (
        "_sm_emulator_" in frame.file)


def blocked_in(frames: Sequence[Frame]) -> str | None:
    """The ``torch.distributed`` call the thread is in: the outermost function of the run of
    ``torch.distributed`` frames that the first user frame (from the innermost) called."""
    for i, frame in enumerate(frames):
        if is_user_frame(frame):
            chain = []
            for inner in reversed(frames[:i]):  # outermost first
                if not _is_dist(inner):
                    break
                chain.append(inner.function)
            names = [n for n in chain if n not in _GENERIC and not n.startswith("_")]
            return names[0] if names else None
    return None


def where(stack: ProcessStack) -> tuple[str, str | None]:
    """(innermost user frame, torch.distributed call) of the process's main thread."""
    if stack.mechanism is None:
        return f"no stack ({stack.problem})", None
    thread = stack.main_thread
    if thread is None or not thread.frames:
        return "no Python frames", None
    user = next((f for f in thread.frames if is_user_frame(f)), None)
    if user is None:
        return f"{thread.frames[0].short()} (library)", None
    return user.short(), blocked_in(thread.frames)


# -- summary ------------------------------------------------------------------------------------
def ranges(numbers: Iterable[int]) -> str:
    """``0-2, 5`` for [0, 1, 2, 5]."""
    out: list[str] = []
    values = sorted(set(numbers))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}" if j > i + 1
                   else f"{values[i]}, {values[j]}")
        i = j + 1
    return ", ".join(out)


def by_host(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """In-host records grouped by their ``host``, hosts in ``algo-N`` order, records in their order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        grouped.setdefault(str(r.get("host")), []).append(r)
    return [(host, grouped[host]) for host in sorted(grouped, key=host_order)]


def rank_processes(stacks: Sequence[ProcessStack]) -> list[ProcessStack]:
    """The processes that are ranks: a rank, and not a child of the same rank (DataLoader workers)."""
    return sorted((s for s in stacks if s.rank is not None and s.parent_rank != s.rank),
                  key=lambda s: (s.rank, host_order(s.host), s.pid))


def summarise(stacks: Sequence[ProcessStack]) -> list[str]:
    """One line per group of ranks at the same place (ranks in order of their first rank)."""
    groups: dict[tuple[str, str | None], list[ProcessStack]] = {}
    for s in rank_processes(stacks):
        groups.setdefault(where(s), []).append(s)
    lines = []
    for (place, call), members in sorted(groups.items(), key=lambda kv: min(m.rank or 0 for m in kv[1])):
        ranks = [m.rank for m in members if m.rank is not None]
        hosts = ", ".join(sorted({m.host for m in members}, key=host_order))
        label = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranges(ranks)}"
        lines.append(f"{label} ({hosts}): {call + ' at ' if call else ''}{place}")
    return lines


def render(stacks: Sequence[ProcessStack]) -> str:
    """Full text of every process's stacks (one host's file)."""
    out = []
    for s in sorted(stacks, key=lambda s: (s.rank is None, s.rank or 0, s.pid)):
        who = f"rank {s.rank}" if s.rank is not None else "no rank"
        out.append(f"== {s.host} pid {s.pid} (pid {s.machine_pid} on this machine), {who}: {' '.join(s.argv)[:200]}")
        if s.mechanism is None:
            out.append(f"   no stack: {s.problem}")
        else:
            out.append(f"   via {s.mechanism}")
            for t in s.threads:
                main = " (main thread)" if s.main_thread is t else ""
                out.append(f"   Thread {t.ident}{' ' + repr(t.name) if t.name else ''}{main}, most recent call first:")
                out += [f'     File "{f.file}", line {f.line} in {f.function}' for f in t.frames]
        out.append("")
    return "\n".join(out)


# -- capture ------------------------------------------------------------------------------------
@dataclass
class _Target:
    host: str
    machine_pid: int
    pid: int
    path: Path
    offset: int
    start_time: int


def _header(text: str) -> tuple[str | None, int | None]:
    found = HEADER.findall(text)
    if not found:
        return None, None
    _pid, main, rank, _local, _start = found[-1]
    return main, int(rank) if rank.isdigit() else None


def _recorded_ranks(diag_dir: Path) -> dict[tuple[str, int], int]:
    """(host, pid) → global rank from the process-group records (``_sm_emulator_diag``)."""
    out: dict[tuple[str, int], int] = {}
    for path in diag_dir.glob("*.json"):
        if path.name.startswith(("coll-", "exit-")):
            continue
        try:
            data = json.loads(path.read_text())
            groups = [g for g in data.get("process_groups", []) if "rank" in g]
            if groups:
                out[(str(data["host"]), int(data["pid"]))] = int(groups[-1]["rank"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def _env_rank(machine_pid: int) -> int | None:
    env = proc_environ(machine_pid)
    for name in RANK_VARIABLES:
        if env.get(name, "").isdigit():
            return int(env[name])
    return None


def capture(handle: JobHandle, hosts: Sequence[str], diag_dir: Path, *, timeout: float = DEFAULT_TIMEOUT,
            py_spy: str | None = None) -> list[ProcessStack]:
    """Ask every registered Python process of every running host for its stacks (see the module
    docstring); returns one entry per Python process found, answered or not."""
    deadline = time.monotonic() + timeout
    targets: list[_Target] = []
    others: list[tuple[str, int, int]] = []  # Python processes without a stacks file
    bit = 1 << (STACKS_SIGNAL - 1)
    for host in hosts:
        h = handle.hosts.get(host)
        if h is None or h.poll() is not None:
            continue
        for machine_pid in h.pids():
            nspids = proc_nspids(machine_pid)
            stat = proc_stat(machine_pid)
            if not nspids or stat is None:
                continue
            path = diag_dir / f"{STACKS_PREFIX}{host}-{nspids[-1]}.txt"
            if path.exists() and proc_caught_signals(machine_pid) & bit:
                targets.append(_Target(host, machine_pid, nspids[-1], path, path.stat().st_size, stat.start_time))
            elif "python" in os.path.basename((proc_cmdline(machine_pid) or [""])[0]):
                others.append((host, machine_pid, nspids[-1]))
    _send(handle, targets)
    pending = {t.machine_pid: t for t in targets}
    sizes: dict[int, tuple[int, float]] = {}
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        for t in list(pending.values()):
            size = t.path.stat().st_size if t.path.exists() else 0
            last = sizes.get(t.machine_pid)
            if size > t.offset and last is not None and last[0] == size and time.monotonic() - last[1] >= SETTLE:
                del pending[t.machine_pid]
            elif last is None or last[0] != size:
                sizes[t.machine_pid] = (size, time.monotonic())
    ranks = _recorded_ranks(diag_dir)
    stacks: list[ProcessStack] = []
    for t in targets:
        data = t.path.read_bytes() if t.path.exists() else b""
        main, header_rank = _header(data.decode(errors="replace"))
        rank = ranks.get((t.host, t.pid), header_rank)
        if rank is None:
            rank = _env_rank(t.machine_pid)
        stack = ProcessStack(t.host, t.pid, t.machine_pid, rank, proc_cmdline(t.machine_pid), main)
        dump = data[t.offset:].decode(errors="replace")
        if t.machine_pid in pending:
            state = proc_stat(t.machine_pid)
            stack.problem = (f"no answer in {timeout:g} s" + (" (process stopped)" if state and state.state == "T"
                                                                else "" if state else " (process gone)"))
        else:
            stack.threads, stack.mechanism, stack.raw = parse_faulthandler(dump), "faulthandler", dump
        stacks.append(stack)
    for host, machine_pid, pid in others:
        rank = ranks.get((host, pid), _env_rank(machine_pid))
        stacks.append(ProcessStack(host, pid, machine_pid, rank, proc_cmdline(machine_pid),
                                   problem="not registered (Python started without site?)"))
    if py_spy:
        for stack in stacks:
            if stack.mechanism is None:
                _py_spy(py_spy, stack, max(1.0, deadline - time.monotonic() + 1.0))
    by_machine = {s.machine_pid: s for s in stacks}
    for s in stacks:
        stat = proc_stat(s.machine_pid)
        parent = by_machine.get(stat.ppid) if stat else None
        s.parent_rank = parent.rank if parent is not None else None
    return stacks


def _send(handle: JobHandle, targets: Sequence[_Target]) -> None:
    """Signal each target from here; where not permitted, with ``kill`` inside its host."""
    inside: dict[str, list[int]] = {}
    for t in targets:
        stat = proc_stat(t.machine_pid)
        if stat is None or stat.start_time != t.start_time:  # gone or a reused pid
            continue
        try:
            os.kill(t.machine_pid, STACKS_SIGNAL)
        except ProcessLookupError:
            continue
        except PermissionError:
            inside.setdefault(t.host, []).append(t.pid)
    for host, pids in inside.items():
        try:
            argv = handle.exec_argv(host, ["kill", f"-{STACKS_SIGNAL}", *map(str, pids)])
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=DEFAULT_TIMEOUT, check=False)
        except (OSError, subprocess.SubprocessError, Exception):
            continue


def _py_spy(py_spy: str, stack: ProcessStack, timeout: float) -> None:
    try:
        done = subprocess.run([py_spy, "dump", "--nonblocking", "--pid", str(stack.machine_pid)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        stack.problem = f"{stack.problem}; py-spy: {exc}"
        return
    threads = parse_py_spy(done.stdout)
    if done.returncode == 0 and threads:
        stack.threads, stack.mechanism, stack.raw, stack.problem = threads, "py-spy", done.stdout, None
    else:
        stack.problem = f"{stack.problem}; py-spy: {(done.stderr or done.stdout).strip()[:200]}"


def find_py_spy() -> str | None:
    """``py-spy`` on this machine's PATH or beside this interpreter (a venv's ``bin``), or None."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))


# -- the observer -------------------------------------------------------------------------------
@dataclass
class _Capture:
    reason: str
    wall: float
    seconds: float
    stacks: list[ProcessStack]


class StackCapture(Observer):
    """Captures every rank's stacks before the supervisor stops hosts that still run.

    ``mechanism``: ``auto`` (faulthandler, then py-spy for the silent ones when installed),
    ``faulthandler``, ``py-spy`` (py-spy only; needs it installed) or ``off``.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, mechanism: str = "auto") -> None:
        if mechanism not in ("auto", "faulthandler", "py-spy", "off"):
            raise ValueError(f"stack capture mechanism must be auto, faulthandler, py-spy or off, got {mechanism!r}")
        self.timeout = timeout
        self.mechanism = mechanism
        self.ctx: AttemptContext | None = None
        self.captures: list[_Capture] = []

    def on_start(self, ctx: AttemptContext) -> None:
        self.ctx = ctx

    def before_stop(self, reason: StopReason) -> Sequence[Any]:
        ctx = self.ctx
        if ctx is None or self.mechanism == "off" or StopReason(reason) not in CAPTURE_REASONS:
            return ()
        started = time.monotonic()
        py_spy = find_py_spy() if self.mechanism in ("auto", "py-spy") else None
        if self.mechanism == "py-spy":
            stacks = capture(ctx.handle, ctx.hosts, ctx.diag_dir, timeout=0.0, py_spy=py_spy)
        else:
            stacks = capture(ctx.handle, ctx.hosts, ctx.diag_dir, timeout=self.timeout, py_spy=py_spy)
        self.captures.append(_Capture(StopReason(reason).value, time.time(), time.monotonic() - started, stacks))
        return ()

    def report(self, finish: FinishContext) -> Report:
        if not self.captures:
            return Report()
        last = self.captures[-1]
        folder = finish.job_dir / "stacks"
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        hosts = sorted({s.host for c in self.captures for s in c.stacks}, key=host_order)
        for host in hosts:
            text = "".join(
                f"# stacks at {_iso(c.wall)} ({c.reason}), captured in {c.seconds:.2f} s\n\n"
                + render([s for s in c.stacks if s.host == host]) + "\n"
                for c in self.captures)
            path = folder / f"{host}.txt"
            path.write_text(text)
            files[host] = str(path)
            log = next((h.log for h in finish.hosts if h.name == host), None)
            if log is not None:
                with open(log, "a") as f:
                    f.write(f"[emulator] Python stacks of every process of {host} before the stop "
                            f"(also in {path}):\n{text}")
        lines = summarise(last.stacks)
        mechanisms = sorted({s.mechanism for s in last.stacks if s.mechanism})
        ranks = [{"Rank": s.rank, "Host": s.host, "Pid": s.pid, "Where": where(s)[0], "Call": where(s)[1],
                  "Mechanism": s.mechanism, "Problem": s.problem} for s in rank_processes(last.stacks)]
        console = [f"where each rank was at the stop ({last.reason}):", *(f"    {line}" for line in lines)]
        if not lines:
            console = [f"stacks at the stop ({last.reason}): no rank process answered; see {folder}"]
        else:
            console.append(f"    full stacks: {folder}/<host>.txt")
        return Report(emulator={"Stacks": {"Reason": last.reason, "Time": _iso(last.wall),
                                           "CaptureSeconds": round(last.seconds, 3),
                                           "Mechanisms": mechanisms, "Summary": lines, "Ranks": ranks,
                                           "Files": files}},
                      console=console)


def _iso(t: float) -> str:
    from ..job.result import iso

    return iso(t)


__all__ = ["Frame", "ProcessStack", "StackCapture", "Thread", "blocked_in", "capture", "is_user_frame",
           "parse_faulthandler", "parse_py_spy", "ranges", "summarise", "where"]

