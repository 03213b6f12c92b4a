"""The suite's closing summary (tests/conftest.py ``pytest_terminal_summary``): tests and worker-seconds
per kind folder, then the costliest modules, so a contributor sees where a cut saves the most."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


class _Reporter:
    def __init__(self, stats: dict[str, list[Any]]) -> None:
        self.stats = stats
        self.lines: list[str] = []
        self.config = SimpleNamespace(getoption=lambda name, default=None: default)

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _report(nodeid: str, duration: float, cpu: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, duration=duration,
                           user_properties=[] if cpu is None else [(conftest.CPU_PROPERTY, cpu)])


def test_the_costliest_modules_are_listed_by_cpu_with_their_share() -> None:
    # setup, call and teardown reports of one test all count to its module; the CPU is on the teardown's
    stats = {"passed": [_report("tests/jobs/test_a.py::test_one", 30.0), _report("tests/jobs/test_b.py::test_two", 5.0),
                        _report("tests/unit/test_c.py::test_three", 1.0)],
             "": [_report("tests/jobs/test_a.py::test_one", 10.0, cpu=6.0),
                  _report("tests/jobs/test_b.py::test_two", 4.0, cpu=13.5),
                  _report("tests/unit/test_c.py::test_three", 0.0, cpu=0.5)]}
    reporter = _Reporter(stats)
    conftest.pytest_terminal_summary(reporter)
    lines = reporter.lines
    assert lines[0] == "== tests per folder"
    assert lines[1].split() == ["tests/jobs", "2", "(2", "passed;", "49", "worker-seconds)"]
    assert lines[2].split() == ["tests/unit", "1", "(1", "passed;", "1", "worker-seconds)"]
    assert lines[3].startswith("== the 3 costliest modules (CPU-seconds")
    # 13.5, 6 and 0.5 of 20 CPU-seconds: the most CPU first, whatever the worker-seconds
    assert [line.split() for line in lines[4:]] == [["14", "CPU-s", "67.5", "%", "9", "s", "tests/jobs/test_b.py"],
                                                    ["6", "CPU-s", "30.0", "%", "40", "s", "tests/jobs/test_a.py"],
                                                    ["0", "CPU-s", "2.5", "%", "1", "s", "tests/unit/test_c.py"]]


def test_a_tests_cpu_is_measured_on_the_worker_that_ran_it(tmp_path: Path) -> None:
    """Under xdist the teardown report carries the test's CPU-seconds to the controller: a test that
    burns about half a CPU-second in a child process shows at least that much in the summary."""
    module = tmp_path / "tests" / "unit" / "test_burn.py"
    module.parent.mkdir(parents=True)
    module.write_text("import subprocess, sys\n\n"
                      "def test_burn():\n"
                      "    subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
                      "while time.process_time() - t < 0.5: pass'], check=True)\n\n"
                      "def test_idle():\n    pass\n")
    (module.parent / "test_other.py").write_text("def test_nothing():\n    pass\n")  # two modules: a list
    (tmp_path / "tests" / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:sagemaker_emulator",
                           "-n", "1", "-q", "--rootdir", str(tmp_path), str(module.parent)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.endswith("tests/unit/test_burn.py"))
    assert float(row.split()[0]) >= 0.5, done.stdout
