"""Stack capture on real processes: torchrun ranks with the in-host site folder, gloo on CPU.

The oracle for frames is the script itself (the line numbers of its statements, found in its
text) and CPython's own ``faulthandler`` output; nothing is compared with the capture code's
own output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from emulator.diagnostics import stacks
from emulator.inhost import SITE
from emulator.inhost import protocol as proto

from .conftest import PYTHON, TORCHRUN, free_port, inhost_env

HOST = os.uname().nodename
HANG = textwrap.dedent("""\
    import os, sys, time
    import torch
    import torch.distributed as dist


    def load_batch():
        while True:
            time.sleep(0.05)  # READER


    def step(t):
        dist.all_reduce(t)  # STEP


    dist.init_process_group("gloo")
    t = torch.ones(4)
    step(t)
    os.write(1, f"WARM {dist.get_rank()}\\n".encode())
    if dist.get_rank() == 1:
        load_batch()
    step(t)
""")


def _line(script: str, marker: str) -> int:
    return next(i for i, text in enumerate(script.splitlines(), 1) if marker in text)


class _Host:
    """The processes of one launched command, as a backend's HostHandle reports them."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def poll(self) -> int | None:
        return self.proc.poll()

    def pids(self) -> list[int]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []


class _Many(_Host):
    """Several unrelated processes as one host."""

    def __init__(self, procs: list[subprocess.Popen[bytes]]) -> None:
        super().__init__(procs[0])
        self.procs = procs

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]


class _Job:
    def __init__(self, hosts: dict[str, _Host]) -> None:
        self.hosts = hosts

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        return list(argv)


def _start(tmp_path: Path, script: str, nproc: int, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "train.py").write_text(script)
    diag = tmp_path / "diag"
    diag.mkdir()
    proc = subprocess.Popen(
        [str(TORCHRUN), "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1", "--master_port",
         str(free_port()), str(tmp_path / "train.py")],
        env=inhost_env(0, EMULATOR_DIAG_DIR=str(diag), **env), cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True)
    return proc, diag


def _wait_for(proc: subprocess.Popen[bytes], count: int, word: bytes = b"WARM") -> None:
    seen = 0
    assert proc.stdout is not None
    while seen < count:
        line = proc.stdout.readline()
        assert line, "the script ended before every rank was ready"
        seen += line.startswith(word)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command and every process it started (torchrun's ranks have their own sessions)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    proc.kill()
    for child in family:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(family, timeout=10)


def test_constants_match_the_protocol() -> None:
    sys.path.insert(0, str(SITE))
    try:
        import _sm_emulator_exits
        import _sm_emulator_stacks
    finally:
        sys.path.remove(str(SITE))
    assert (_sm_emulator_stacks.STACKS_SIGNAL, _sm_emulator_stacks.STACKS_PREFIX, _sm_emulator_stacks.ENV_DIAG_DIR) \
        == (proto.STACKS_SIGNAL, proto.STACKS_PREFIX, proto.ENV_DIAG_DIR)
    assert (_sm_emulator_exits.EXIT_PREFIX, _sm_emulator_exits.ENDED_PREFIX, _sm_emulator_exits.ENV_DIAG_DIR) \
        == (proto.EXIT_PREFIX, proto.ENDED_PREFIX, proto.ENV_DIAG_DIR)
    assert signal.SIGRTMIN <= proto.STACKS_SIGNAL <= signal.SIGRTMAX


def test_ranks_of_a_hang_report_where_they_are(tmp_path: Path) -> None:
    proc, diag = _start(tmp_path, HANG, 2)
    try:
        _wait_for(proc, 2)
        time.sleep(0.5)  # rank 0 enters its second all_reduce, rank 1 its reader
        found = stacks.capture(_Job({HOST: _Host(proc)}), [HOST], diag, timeout=10)
        alive = proc.poll() is None
    finally:
        _stop(proc)
    assert alive, "the signal must not end any process"
    by_rank = {s.rank: s for s in stacks.rank_processes(found)}
    assert sorted(by_rank) == [0, 1]
    assert stacks.where(by_rank[0]) == (f"train.py:{_line(HANG, '# STEP')} in step", "all_reduce")
    assert stacks.where(by_rank[1]) == (f"train.py:{_line(HANG, '# READER')} in load_batch", None)
    assert {s.mechanism for s in found} == {"faulthandler"}  # torchrun too: every Python process registered
    assert stacks.summarise(found) == [
        f"rank 0 ({HOST}): all_reduce at train.py:{_line(HANG, '# STEP')} in step",
        f"rank 1 ({HOST}): train.py:{_line(HANG, '# READER')} in load_batch",
    ]


def test_only_registered_processes_get_the_signal(tmp_path: Path) -> None:
    """A Python without site (no handler) and a non-Python process are never signalled: the
    real-time signal's default action would kill them."""
    diag = tmp_path / "diag"
    diag.mkdir()
    env = inhost_env(0, EMULATOR_DIAG_DIR=str(diag))
    plain = subprocess.Popen([str(PYTHON), "-S", "-c", "import time; time.sleep(60)"], env=env)
    sleeper = subprocess.Popen(["sleep", "60"], env=env)
    registered = subprocess.Popen([str(PYTHON), "-c", "import os, time; os.write(1, b'UP\\n'); time.sleep(60)"],
                                  env=env, stdout=subprocess.PIPE)
    try:
        _wait_for(registered, 1, b"UP")
        found = stacks.capture(_Job({HOST: _Many([plain, sleeper, registered])}), [HOST], diag, timeout=5)
        running = [p.poll() for p in (plain, sleeper, registered)]
    finally:
        for p in (plain, sleeper, registered):
            p.kill()
            p.wait()
    assert running == [None, None, None]
    by_pid = {s.machine_pid: s for s in found}
    assert by_pid[registered.pid].mechanism == "faulthandler"
    assert by_pid[plain.pid].mechanism in (None, "py-spy")  # py-spy answers for it when installed
    assert sleeper.pid not in by_pid


def test_a_forked_child_dumps_into_its_own_file(tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    # UP is written from inside child_waits, so the child is in that frame when the capture comes
    code = ("import os, time\npid = os.fork()\nif pid == 0:\n    def child_waits():\n"
            "        os.write(1, b'UP\\n'); time.sleep(60)\n    child_waits()\nelse:\n    time.sleep(60)\n")
    proc = subprocess.Popen([str(PYTHON), "-c", code], env=inhost_env(0, EMULATOR_DIAG_DIR=str(diag)),
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for(proc, 1, b"UP")
        found = stacks.capture(_Job({HOST: _Host(proc)}), [HOST], diag, timeout=5)
    finally:
        _stop(proc)
    child = next(s for s in found if s.machine_pid != proc.pid)
    assert child.main_thread is not None and child.main_thread.frames[0].function == "child_waits"
    assert len(list(diag.glob("stacks-*.txt"))) == 2


def test_faulthandler_output_parses() -> None:
    """CPython's own faulthandler text (the oracle) for two threads."""
    code = textwrap.dedent("""\
        import faulthandler, sys, threading, time
        def worker():
            time.sleep(5)
        threading.Thread(target=worker, daemon=True).start()
        time.sleep(0.2)
        def outer():
            faulthandler.dump_traceback(all_threads=True)
        outer()
    """)
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    threads = stacks.parse_faulthandler(text)
    assert len(threads) == 2
    current = next(t for t in threads if t.current)
    assert [f.function for f in current.frames] == ["outer", "<module>"]
    other = next(t for t in threads if not t.current)
    assert other.frames[0].function == "worker" and other.frames[-1].function == "_bootstrap"


def test_py_spy_reads_a_stopped_process(tmp_path: Path) -> None:
    """A frozen rank cannot run faulthandler's handler; py-spy reads it from outside."""
    py_spy = stacks.find_py_spy()
    if py_spy is None:
        pytest.skip("py-spy is not installed")
    diag = tmp_path / "diag"
    diag.mkdir()
    code = "import os, time\ndef frozen_here():\n    os.write(1, b'UP\\n'); time.sleep(60)\nfrozen_here()\n"
    proc = subprocess.Popen([str(PYTHON), "-c", code], env=inhost_env(0, EMULATOR_DIAG_DIR=str(diag), RANK="5"),
                            stdout=subprocess.PIPE)
    try:
        _wait_for(proc, 1, b"UP")
        os.kill(proc.pid, signal.SIGSTOP)
        found = stacks.capture(_Job({HOST: _Host(proc)}), [HOST], diag, timeout=0.5, py_spy=py_spy)
        os.kill(proc.pid, signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait()
    (only,) = found
    assert only.rank == 5 and only.mechanism == "py-spy", only.problem
    assert only.main_thread is not None and only.main_thread.frames[0].function in ("frozen_here", "sleep")
    assert any(f.function == "frozen_here" for f in only.main_thread.frames)


def test_ranges_and_grouping() -> None:
    assert stacks.ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7, 8"
    assert stacks.ranges([3]) == "3"


def test_packages_seen_through_the_emulators_cache_are_library_code() -> None:
    """A process-backend rank imports torch from its DLC view (a folder of links in the emulator's
    cache), so torch's frames carry that path: they are library frames, the script's are not."""
    from emulator.cache import cache_dir

    view = cache_dir("views", "0123abcd")
    library = stacks.Frame(str(view / "torch/distributed/distributed_c10d.py"), 3252, "all_reduce")
    venv = stacks.Frame(str(cache_dir("envs", "ff00") / "lib/python3.11/site-packages/x/y.py"), 1, "f")
    user = stacks.Frame("/opt/ml/code/hang_reader.py", 23, "step")
    assert not stacks.is_user_frame(library) and not stacks.is_user_frame(venv)
    assert stacks.is_user_frame(user)
