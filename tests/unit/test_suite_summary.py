"""The suite's closing summary (tests/conftest.py ``pytest_terminal_summary``): tests and worker-seconds
per kind folder, then the costliest modules, so a contributor sees where a cut saves the most."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests import conftest


class _Reporter:
    def __init__(self, stats: dict[str, list[Any]]) -> None:
        self.stats = stats
        self.lines: list[str] = []
        self.config = SimpleNamespace(getoption=lambda name, default=None: default)

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"== {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _report(nodeid: str, duration: float) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, duration=duration)


def test_the_costliest_modules_are_listed_with_their_share() -> None:
    # setup, call and teardown reports of one test all count to its module
    stats = {"passed": [_report("tests/jobs/test_a.py::test_one", 30.0), _report("tests/jobs/test_b.py::test_two", 5.0),
                        _report("tests/unit/test_c.py::test_three", 1.0)],
             "": [_report("tests/jobs/test_a.py::test_one", 10.0), _report("tests/jobs/test_b.py::test_two", 4.0)]}
    reporter = _Reporter(stats)
    conftest.pytest_terminal_summary(reporter)
    lines = reporter.lines
    assert lines[0] == "== tests per folder"
    assert lines[1].split() == ["tests/jobs", "2", "(2", "passed;", "49", "worker-seconds)"]
    assert lines[2].split() == ["tests/unit", "1", "(1", "passed;", "1", "worker-seconds)"]
    assert lines[3] == "== the 3 costliest modules (worker-seconds, share of all)"
    # 40 of 50 worker-seconds, then 9, then 1: slowest first
    assert [line.split() for line in lines[4:]] == [["40", "s", "80.0", "%", "tests/jobs/test_a.py"],
                                                    ["9", "s", "18.0", "%", "tests/jobs/test_b.py"],
                                                    ["1", "s", "2.0", "%", "tests/unit/test_c.py"]]
