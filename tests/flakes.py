"""Flake detector: run tests that start real jobs, under load, until each has passed N times.

A test that needs a quiet machine to pass is a defect. This runs the chosen tests in
rounds of ``pytest -n WORKERS --dist loadgroup`` (more workers than cores: the jobs compete for
CPU) with ``--hog K`` busy-looping processes beside them, until every test has passed ``--passes``
times or ``--max-rounds`` rounds ran; it prints one row per test (passed, failed, skipped) and exits
1 when any test failed (or errored) even once, 2 when one never ran. Each round's JUnit XML and
output stay under ``--keep`` (default: a temp folder, printed).

    python -m tests.flakes                           # DEFAULT_TESTS, 3 passes, -n 4, one hog per core
    python -m tests.flakes --passes 5 --hog 0 -- tests/jobs/test_security.py  # a module: each of its tests
    python3 -m nox -s flakes -- --passes 3           # the same in the test environment

Only the tests named run (a whole module is fine); the suite's autouse hygiene fixture still checks
every test for leaks. Note that the first of :data:`DEFAULT_TESTS` (the kept-hosts CLI test) runs
``python -m emulator reap`` machine-wide: on a machine shared with other runs of the suite, leave
it out (name the other tests).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Tests that start real jobs and read what their ranks print or the hosts they kept.
DEFAULT_TESTS = (
    "tests/jobs/test_kept.py::test_cli_keeps_the_hosts_of_a_stopped_job_for_shell_ps_and_reap",
    "tests/jobs/test_kept.py::test_a_job_killed_before_its_kept_record_is_still_reaped_by_job",
    "tests/jobs/test_security.py::test_hosts_do_not_see_the_users_aws_credentials",
    "tests/jobs/test_fault_jobs.py::test_spot_interruption_resumes_from_checkpoints",
    "tests/jobs/test_framework_jobs.py::test_no_framework_version_keeps_todays_torch_and_says_so",
)
#: A CPU hog: one busy loop (ended by pid when the detector ends).
HOG = "while True:\n    pass\n"


@dataclass
class Tally:
    """One test's results over the rounds."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    messages: list[str] = field(default_factory=list)


def node_id(case: ET.Element) -> str:
    """``tests/jobs/test_x.py::test_name[param]`` of a JUnit ``testcase``."""
    module = case.get("classname", "")
    parts = module.split(".")
    path = "/".join(parts) + ".py"
    while parts and not (ROOT / path).is_file():  # a test class: classname is module.Class
        parts = parts[:-1]
        path = "/".join(parts) + ".py"
    cls = module[len(".".join(parts)) + 1:]
    return f"{path}::{cls + '::' if cls else ''}{case.get('name')}"


def read_round(xml: Path, tallies: dict[str, Tally]) -> None:
    """Add one round's JUnit results to ``tallies``."""
    for case in ET.parse(xml).getroot().iter("testcase"):
        tally = tallies.setdefault(node_id(case), Tally())
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            tally.failed += 1
            tally.messages.append((bad.get("message") or "")[:300])
        elif case.find("skipped") is not None:
            tally.skipped += 1
        else:
            tally.passed += 1


def start_hogs(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy-looping processes."""
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(count)]


def stop_hogs(hogs: Sequence[subprocess.Popen[bytes]]) -> None:
    for hog in hogs:
        hog.kill()
        hog.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.flakes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=3, help="passes each test needs (default 3)")
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers (default 4)")
    parser.add_argument("--hog", type=int, default=os.cpu_count() or 1,
                        help="busy-looping processes beside the tests (default: one per core)")
    parser.add_argument("--max-rounds", type=int, default=None,
                        help="give up after this many rounds (default: passes + 2)")
    parser.add_argument("--keep", type=Path, default=None, help="folder for each round's JUnit XML and output")
    parser.add_argument("tests", nargs="*", default=list(DEFAULT_TESTS), help="pytest node ids (default: %(default)s)")
    args = parser.parse_args(argv)
    keep = args.keep or Path(tempfile.mkdtemp(prefix="flakes-"))
    keep.mkdir(parents=True, exist_ok=True)
    rounds = args.max_rounds if args.max_rounds is not None else args.passes + 2
    tallies: dict[str, Tally] = {}
    hogs = start_hogs(args.hog)
    try:
        for number in range(1, rounds + 1):
            pending = [t for t in args.tests if _passes(tallies, t) < args.passes]
            if not pending:
                break
            xml = keep / f"round-{number}.xml"
            with open(keep / f"round-{number}.txt", "w") as out:
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", str(args.workers),
                     "--dist", "loadgroup", f"--junitxml={xml}", *pending],
                    cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False)
            if xml.is_file():
                read_round(xml, tallies)
            print(f"round {number}: pytest exit {done.returncode} ({len(pending)} test(s); output: "
                  f"{keep / f'round-{number}.txt'})", flush=True)
    finally:
        stop_hogs(hogs)
    print(f"\n{'passed':>6} {'failed':>6} {'skipped':>7}  test  (-n {args.workers}, {args.hog} hog(s), "
          f"{os.cpu_count()} cores)")
    for test, tally in sorted(tallies.items()):
        print(f"{tally.passed:>6} {tally.failed:>6} {tally.skipped:>7}  {test}")
        for message in tally.messages:
            print(f"{'':>22}failure: {message}")
    if any(t.failed for t in tallies.values()):
        return 1
    return 0 if all(_passes(tallies, t) >= args.passes for t in args.tests) else 2


def _passes(tallies: dict[str, Tally], selector: str) -> int:
    """The fewest passes (skips count: a skipped test will not pass in the next round either)
    among the tests ``selector`` names: a node id, a parametrized test's id without its
    ``[param]``, or a module; 0 before any ran."""
    chosen = [t.passed + t.skipped for test, t in tallies.items()
              if test == selector or test.startswith((f"{selector}[", f"{selector}::"))]
    return min(chosen) if chosen else 0


if __name__ == "__main__":
    sys.exit(main())
