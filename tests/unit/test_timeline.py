"""The timeline's front ends: the CLI on a folder that is not a job, and a job without matplotlib.
(The timeline of a real job is checked in tests/jobs/test_stacks_jobs.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


def test_cli_on_a_folder_without_a_timeline(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "emulator", "timeline", str(tmp_path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {tmp_path / 'timeline.json'} does not exist: JOB_DIR must be a job's folder")


def test_without_matplotlib_only_the_json_is_written(tmp_path: Path) -> None:
    """matplotlib made unimportable in a fresh interpreter; the report still writes timeline.json."""
    code = textwrap.dedent(f"""\
        import sys
        sys.modules["matplotlib"] = None  # import matplotlib now raises ImportError
        from pathlib import Path
        from emulator.observers import Event, FinishContext
        from emulator.diagnostics.timeline import Timeline
        job = Path({str(tmp_path)!r})
        finish = FinishContext(job, job / "no-diagnostics", "Completed", "Completed", (),
                               (Event(100.0, "host-start", "algo-1"), Event(105.0, "host-exit", "algo-1", "exit 0")),
                               None)
        timeline = Timeline("job")
        timeline.on_line("algo-1", "2024-01-01 00:00:00,000 sagemaker-training-toolkit INFO     Imported framework x")
        report = timeline.report(finish)
        print(report.console[0])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "matplotlib is not installed, so no PNG" in done.stdout
    assert not (tmp_path / "timeline.png").exists()
    data = json.loads((tmp_path / "timeline.json").read_text())
    assert [e["Kind"] for e in data["Events"]] == ["host-start", "host-exit", "toolkit-start"]
    assert data["Hosts"] == ["algo-1"]


def test_phases_end_where_the_slowest_host_or_rank_reaches_each_event() -> None:
    """A 2x2 pytorchddp job's events as its timeline.json recorded them (times shifted to 0): each
    phase runs from the previous phase's last event to its own last one."""
    from emulator.diagnostics.timeline import phases

    recorded = [(0.0, "status", None), (0.24, "status", None), (0.45, "host-start", "algo-1"),
                (0.45, "host-start", "algo-2"), (0.84, "toolkit-start", "algo-1"), (0.94, "toolkit-start", "algo-2"),
                (1.54, "launcher", "algo-1"), (1.73, "rank-start", "algo-1"), (1.77, "rank-start", "algo-1"),
                (1.74, "rank-start", "algo-2"), (5.79, "process-group", "algo-2"), (5.79, "process-group", "algo-1"),
                (8.31, "host-exit", "algo-2"), (8.36, "host-exit", "algo-1")]
    data = {"Events": [{"Time": 100 + t, "Kind": k, "Host": h, "Rank": None, "Detail": ""} for t, k, h in recorded]}
    got = dict(phases(data))
    want = {"hosts up": 0.45, "toolkit up": 0.49, "launcher": 0.60, "ranks start": 0.23, "process groups": 4.02,
            "hosts exit": 2.57}
    assert list(got) == list(want) and all(abs(got[k] - want[k]) < 1e-6 for k in want), got
    # no launcher line and no process group (a plain script that failed): the next phase counts on
    plain = {"Events": [e for e in data["Events"] if e["Kind"] not in ("launcher", "process-group")]}
    assert dict(phases(plain)) == {"hosts up": 0.45, "toolkit up": 0.49, "ranks start": 0.83, "hosts exit": 6.59}
    assert phases({"Events": []}) == []


def test_matplotlib_is_imported_while_the_hosts_run_only_where_a_png_is_drawn() -> None:
    """Where the PNG is drawn, the first attempt's start imports pyplot in a background thread (the
    job's end then waits only for the drawing); the ``ci`` profile's timeline (no PNG) imports nothing."""
    code = textwrap.dedent("""\
        import sys
        from pathlib import Path
        from emulator.observers import AttemptContext
        from emulator.diagnostics.timeline import Timeline
        ctx = AttemptContext(0, None, ("algo-1",), Path("/nonexistent"), 0.0, 100.0)
        quiet = Timeline("job", png=False)
        quiet.on_start(ctx)
        print(quiet.warming is None, "matplotlib.pyplot" in sys.modules)
        drawn = Timeline("job")
        drawn.on_start(ctx)
        drawn.warming.join(120)
        print(drawn.warming.name, "matplotlib.pyplot" in sys.modules, sys.modules["matplotlib"].get_backend())
        drawn.on_start(AttemptContext(1, None, ("algo-1",), Path("/nonexistent"), 5.0, 105.0))  # a spot restart
        print(drawn.warming.name)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=180)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "True False"
    assert lines[1].lower() == "timeline-import true agg"
    assert lines[2] == "timeline-import"
