"""The whole-life ``faulthandler`` file on real processes: a fatal signal leaves the Python stack in
the emulator's file, never in what the process prints, unless the process chose otherwise.

Oracles: the exit status (the process still dies of its signal), CPython's own ``faulthandler``
text, and the script's own line numbers.
"""

from __future__ import annotations

import signal
from pathlib import Path

from emulator.diagnostics import firstdeath

from .conftest import PRELUDE, Runner

CRASH = """\
import ctypes, os


def crash():
    ctypes.string_at(0)  # CRASH


if os.environ.get("MODE") == "own":
    import faulthandler

    faulthandler.enable()  # the script's own choice: stderr
if os.environ.get("MODE") == "fork":
    pid = os.fork()
    if pid == 0:
        crash()
    say("child", os.waitpid(pid, 0)[1] & 0x7f)
    raise SystemExit(0)
crash()
"""
CRASH_LINE = PRELUDE.count("\n") + next(i for i, t in enumerate(CRASH.splitlines(), 1) if "# CRASH" in t)


def _fatal_files(diag: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in diag.glob("fatal-*.txt")}


def test_a_segfault_leaves_its_stack_in_the_emulators_file_not_on_stderr(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script(CRASH, EMULATOR_DIAG_DIR=str(diag), RANK="3", LOCAL_RANK="1")
    assert result.returncode == -signal.SIGSEGV  # still dies of the signal: its parent sees the same
    assert "Fatal Python error" not in result.stderr and "Current thread" not in result.stderr
    (death,) = firstdeath.load_fatal(diag)
    assert (death.rank, death.local_rank, death.signal, death.exit_code) == (3, 1, "SIGSEGV", -11)
    assert [f.function for f in death.frames] == ["string_at", "crash", "<module>"]
    assert death.frames[1].line == CRASH_LINE and death.where == f"script.py:{CRASH_LINE} in crash"


def test_a_forked_child_writes_its_own_file(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script(CRASH, EMULATOR_DIAG_DIR=str(diag), MODE="fork")
    assert result.returncode == 0 and "child 11" in result.stdout
    files = _fatal_files(diag)
    assert len(files) == 2  # the parent's (a header only) and the child's
    (death,) = firstdeath.load_fatal(diag)
    assert f"fatal-{death.host}-{death.pid}.txt" in files and death.signal == "SIGSEGV"


def test_a_script_that_enables_faulthandler_keeps_it(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script(CRASH, EMULATOR_DIAG_DIR=str(diag), MODE="own")
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr and "in crash" in result.stderr
    assert firstdeath.load_fatal(diag) == []


def test_faulthandler_enabled_at_start_is_left_as_it_is(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script(CRASH, EMULATOR_DIAG_DIR=str(diag), PYTHONFAULTHANDLER="1")
    assert result.returncode == -signal.SIGSEGV and "Fatal Python error: Segmentation fault" in result.stderr
    assert _fatal_files(diag) == {}  # not even opened
