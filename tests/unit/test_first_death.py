"""Who died first: torchrun's Root Cause block, the in-host records, their order, the headline.

The torchrun texts are torchrun's own output, copied from real runs (torch 2.13's, which names the
signal after the PID, and the older layout without it); the in-host files have the layout
``_sm_emulator_exits`` writes (tests/jobs/inhost/test_fatal.py checks that on real processes).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from emulator.diagnostics import exitdeaths, firstdeath
from emulator.diagnostics.firstdeath import Death
from emulator.diagnostics.stacks import Frame

#: torchrun 2.13 on algo-1 after rank 0 segfaulted (real output; torchrun SIGTERMed rank 1).
TORCHRUN_2_13 = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
====================================================
first_death.py FAILED
----------------------------------------------------
Failures:
[1]:
  time      : 2026-12-07_19:45:42
  host      : algo-1
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 28)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 28
----------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_19:45:42
  host      : algo-1
  rank      : 0 (local_rank: 0)
  exitcode  : -11 (pid: 27)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 27
====================================================
"""
#: The layout of torch 1.11-2.x before the signal name moved next to the PID (an exception: exit code 1).
TORCHRUN_OLD = """\
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2023-05-02_10:11:12
  host      : ip-10-0-0-2.ec2.internal
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 26)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
SEGV_DUMP = """\
Fatal Python error: Segmentation fault

Thread 0x00007f7f80aaa6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f7f82cb3b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/opt/ml/code/train.py", line 23 in crash
  File "/opt/ml/code/train.py", line 41 in main
  File "/opt/ml/code/train.py", line 49 in <module>

Extension modules: torch._C (total: 1)
"""


def _local(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d_%H:%M:%S").timestamp()


def test_torchrun_root_cause_blocks_are_read_in_both_layouts() -> None:
    (segv,) = firstdeath.root_causes(TORCHRUN_2_13 + TORCHRUN_2_13, "algo-1")  # printed twice: one failure
    assert (segv.host, segv.rank, segv.local_rank, segv.pid, segv.exit_code, segv.signal) == \
        ("algo-1", 0, 0, 27, -11, "SIGSEGV")
    assert segv.time == _local("2026-12-07_19:45:42") and segv.source == "torchrun"
    assert segv.message == "Signal 11 (SIGSEGV) received by PID 27"
    (exc,) = firstdeath.root_causes(TORCHRUN_OLD, "algo-2")  # the log's host, not torchrun's FQDN
    assert (exc.host, exc.rank, exc.local_rank, exc.pid, exc.exit_code, exc.signal) == ("algo-2", 2, 0, 26, 1, None)
    assert firstdeath.root_causes("Failures:\n[1]:\n  rank      : 1 (local_rank: 1)\n", "algo-1") == []


def test_a_torchrun_time_is_read_in_the_zone_that_falls_in_the_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's clock is UTC where this machine's zone may not be: the reading inside the attempt wins."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        attempt = datetime(2026, 12, 7, 19, 45, 0, tzinfo=timezone.utc).timestamp()
        utc_stamp = "2026-12-07_19:45:42"  # a UTC container's local time, 42 s into the attempt
        assert firstdeath._epoch(utc_stamp, since=attempt, now=attempt + 60) == attempt + 42
        tokyo_stamp = "2026-12-08_04:45:42"  # the same moment in this machine's zone
        assert firstdeath._epoch(tokyo_stamp, since=attempt, now=attempt + 60) == attempt + 42
        assert firstdeath._epoch("2020-01-01_00:00:00", since=attempt, now=attempt + 60) is None
        assert firstdeath._epoch("not a time", since=attempt, now=attempt + 60) is None
    finally:
        monkeypatch.undo()
        time.tzset()


def _fatal(diag: Path, host: str, pid: int, rank: str, died: float, dump: str = SEGV_DUMP) -> None:
    path = diag / f"fatal-{host}-{pid}.txt"
    path.write_text(f"# sm-emulator-fatal pid={pid} rank={rank} local=0 start={died - 30:.3f} "
                    f"argv=['train.py', '--epochs', '1']\n{dump}")
    os.utime(path, (died, died))


def _exit(diag: Path, host: str, pid: int, rank: str | None, at: float, exception: str, message: str,
          kind: str = "uncaught") -> None:
    record = {"kind": kind, "host": host, "pid": pid, "time": at, "rank": rank, "local_rank": "1",
              "argv": ["train.py"], "exception": exception, "message": message,
              "where": "/opt/ml/code/train.py:44 in main",
              "stack": ["/opt/ml/code/train.py:44 in main", "/opt/ml/code/train.py:49 in <module>"]}
    (diag / f"exit-{host}-{pid}-1.json").write_text(json.dumps(record))


def test_the_earliest_rank_death_is_first_and_later_ones_are_secondary(tmp_path: Path) -> None:
    t0 = 1_800_000_000.0
    _fatal(tmp_path, "algo-1", 27, "0", t0)
    _fatal(tmp_path, "algo-1", 40, "-", t0 - 100, dump="")  # a process that lives on: a header, no dump
    _exit(tmp_path, "algo-2", 26, "2", t0 + 0.7, "RuntimeError", "[pair.cc:553] Connection closed by peer [10.0.0.3]:1")
    _exit(tmp_path, "algo-1", 28, "1", t0 + 0.05, "RuntimeError", "[pair.cc:537] Connection reset by peer")
    _exit(tmp_path, "algo-1", 22, None, t0 + 2, "ChildFailedError", "torchrun: a consequence")
    _exit(tmp_path, "algo-2", 27, "3", t0 - 5, "ValueError", "a thread's end", kind="thread")  # the process went on
    _exit(tmp_path, "algo-2", 30, None, t0 - 9, "KeyError", "no rank: a launcher or helper")
    log = tmp_path / "algo-1.log"
    log.write_text(TORCHRUN_2_13)
    found = firstdeath.find(tmp_path, {"algo-1": log, "algo-2": tmp_path / "missing.log"})
    assert found is not None
    first, later, roots = found
    assert [(r.host, r.rank, r.exit_code) for r in roots] == [("algo-1", 0, -11)]
    assert (first.host, first.rank, first.pid, first.signal, first.exit_code, first.time) == \
        ("algo-1", 0, 27, "SIGSEGV", -11, t0)
    assert first.where == "train.py:23 in crash" and first.argv == ("train.py", "--epochs", "1")
    assert [f.function for f in first.frames] == ["string_at", "crash", "main", "<module>"]  # the current thread
    assert [(d.host, d.rank) for d in later] == [("algo-1", 1), ("algo-2", 2)]
    assert later[0].exit_code == 1 and later[0].where == "train.py:44 in main"
    # a record older than the attempt is not read
    assert firstdeath.load_fatal(tmp_path, since=t0 + 1) == []


def test_a_rank_only_torchrun_saw_is_ordered_by_its_second() -> None:
    """A rank killed by SIGKILL (OOM) leaves no in-host record: torchrun's root cause stands for it."""
    t0 = 1_800_000_000.0
    oom = Death("algo-2", 3, 1, 31, t0, "torchrun", signal="SIGKILL", exit_code=-9)
    reset = Death("algo-1", 0, 0, 27, t0 + 0.4, "exception", exit_code=1, exception="RuntimeError")
    merged = Death("algo-1", 0, None, 27, t0 + 1, "torchrun", exit_code=1)  # same rank: completes the record
    first, later = firstdeath.decide([reset], [oom, merged]) or (None, [])
    assert first == oom and [(d.host, d.rank, d.source) for d in later] == [("algo-1", 0, "exception")]
    assert later[0].local_rank == 0
    # within a second, a signal sorts before an exit code; nothing timed: no secondary
    a = Death("algo-1", 1, 1, 5, None, "torchrun", exit_code=1)
    b = Death("algo-2", 2, 0, 6, None, "torchrun", signal="SIGSEGV", exit_code=-11)
    assert firstdeath.decide([], [a, b]) == (b, [])
    assert firstdeath.decide([], []) is None


def test_the_record_and_its_headline() -> None:
    t0 = 1_800_000_000.0
    frames = (Frame("/usr/lib/python3.11/ctypes/__init__.py", 519, "string_at"), Frame("/opt/ml/code/train.py", 23,
                                                                                      "crash"))
    first = Death("algo-1", 0, 0, 27, t0, "faulthandler", signal="SIGSEGV", exit_code=-11, frames=frames,
                  dump="Fatal Python error: Segmentation fault")
    later = [Death("algo-2", 2, 0, 26, t0 + 0.25, "exception", exit_code=1, exception="RuntimeError",
                   message="[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                           "[10.0.0.3]:33675. This is typically caused by a remote worker crashing.")]
    record = firstdeath.describe(first, later, [], Path("/job/first-death.txt"))
    assert record["Stack"] == ["ctypes/__init__.py:519 in string_at", "train.py:23 in crash"]
    assert record["Where"] == "train.py:23 in crash" and record["Secondary"][0]["AfterSeconds"] == 0.25
    lines = firstdeath.headline(record)
    assert lines[0] == record["Headline"] == (
        "first death: algo-1 rank 0 (local rank 0, pid 27) died of SIGSEGV (exit code -11) at "
        "2027-01-15T08:00:00.000+00:00, in train.py:23 in crash, before 1 later failure")
    assert lines[1:] == [
        "  its Python stack, most recent call first:",
        "    ctypes/__init__.py:519 in string_at",
        "    train.py:23 in crash",
        "  every thread: /job/first-death.txt",
        "  secondary (after it): algo-2 rank 2 (+0.25 s): RuntimeError: Connection closed by peer [10.0.0.3]:33675",
    ]


GLOO_ABORT_DUMP = ("Fatal Python error: Aborted\n\nThread 0x00007ff6b606cb80 (most recent call first):\n"
                   "  <no Python frame>\n")


def test_a_death_at_exit_is_read_from_the_whole_life_file(tmp_path: Path) -> None:
    """The ``ended-`` mark is a header only when the whole-life handler is the emulator's: the dump
    is in the ``fatal-`` file; one of a later process with the same PID does not count."""
    (tmp_path / "ended-algo-1-61.txt").write_text('{"host": "algo-1", "pid": 61, "time": 100.0, "rank": "3"}\n')
    (tmp_path / "fatal-algo-1-61.txt").write_text(
        "# sm-emulator-fatal pid=61 rank=3 local=1 start=90.000 argv=['train.py']\n" + GLOO_ABORT_DUMP)
    (tmp_path / "ended-algo-1-62.txt").write_text('{"host": "algo-1", "pid": 62, "time": 100.0, "rank": "2"}\n')
    (tmp_path / "fatal-algo-1-62.txt").write_text(  # PID 62 again, started after the first one ended
        "# sm-emulator-fatal pid=62 rank=- local=- start=150.000 argv=['helper.py']\n" + GLOO_ABORT_DUMP)
    records = exitdeaths.load(tmp_path)
    assert [(r["pid"], r["fatal"], r["where"]) for r in records] == [(61, "Aborted", None)]
