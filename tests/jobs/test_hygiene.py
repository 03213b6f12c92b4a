"""Nothing of a job outlives its emulator: SIGKILL and SIGINT of ``python -m emulator run``.

Plus positive controls for the leak detectors of ``conftest.py`` (they must be able to fail), and
a check of the suite itself: no test whose every assertion sits in a loop that may run zero times.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from emulator.inhost.protocol import proc_environ, proc_stat

from ..conftest import docker_leftovers, listening_sockets, our_processes

#: How long the job's processes may take to vanish after the emulator died.
VANISH_TIMEOUT = 10.0
START_TIMEOUT = 90.0

SLEEPER = """\
import os, socket, time
print("READY", socket.gethostname(), os.getpid(), flush=True)
time.sleep(300)
"""


def job_processes(job_name: str) -> dict[int, str]:
    """Live processes of this machine whose environment names the job (any namespace)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = proc_stat(int(entry))
        if stat is not None and stat.state not in ("Z", "X") and \
                proc_environ(stat.pid).get("TRAINING_JOB_NAME") == job_name:
            out[stat.pid] = stat.state
    return out


def _wait_for(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


def _start(tmp_path: Path, hosts: int = 2) -> tuple[subprocess.Popen[str], str, Path]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "sleeper.py").write_text(SLEEPER)
    job = f"qa-sig-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", "run", "--entry-point", "sleeper.py", "--source-dir",
         str(src), "--hosts", str(hosts), "--output-dir", str(out), "--job-name", job,
         "--quiet", "--stop-grace", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = out / job / "logs"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"emulator exited early ({proc.returncode}): {proc.communicate()}")
        return all((logs / f"algo-{i}.log").exists() and
                   "READY" in (logs / f"algo-{i}.log").read_text(errors="replace")
                   for i in range(1, hosts + 1))

    _wait_for(ready, START_TIMEOUT, "every host to print READY")
    return proc, job, out


def test_sigkill_of_the_emulator_leaves_no_process(tmp_path: Path) -> None:
    proc, job, out = _start(tmp_path)
    running = job_processes(job)
    # Positive control: the hosts' processes are visible by their job name before the kill.
    assert len(running) >= 2, running
    proc.kill()
    proc.wait(timeout=10)
    _wait_for(lambda: not job_processes(job), VANISH_TIMEOUT,
              f"the processes of {job} to die after SIGKILL of the emulator")
    # The namespace agent and unshare carry this test run's owner variable: gone as well.
    _wait_for(lambda: not our_processes(), VANISH_TIMEOUT, "the namespace agent to exit")
    # What a killed emulator cannot clean up is its scratch tree; `reap` removes it.
    from emulator.kept.reap import reap_temp

    removed = reap_temp()
    assert any(job[:20] in line for line in removed), removed
    assert not (out / job / "job.json").exists()  # it never got to describe the job


def test_sigint_stops_the_job_exit_130_and_cleans_up(tmp_path: Path) -> None:
    proc, job, out = _start(tmp_path)
    assert job_processes(job)
    proc.send_signal(signal.SIGINT)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr
    assert not job_processes(job)
    assert not our_processes()
    # Ctrl-C is StopTrainingJob: the job is described as Stopped (the hosts were running)
    d = json.loads((out / job / "job.json").read_text())
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "Stopped")
    statuses = [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert "Stopping" in statuses and statuses[-1] == "Stopped", statuses


# --------------------------------------------------------------------------------------------
# The detectors can fail


def test_detector_sees_a_child_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in our_processes()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in our_processes()


def test_detector_sees_a_process_by_owner_variable_alone() -> None:
    # Re-parented processes (ancestry lost) are found by SMEMU_TEST_OWNER in their environment.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _wait_for(lambda: child.pid in our_processes(by_ancestry=False), 5, "the child's environ")
    finally:
        child.kill()
        child.wait()


def test_detector_sees_a_new_listening_socket() -> None:
    before = set(listening_sockets())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        new = set(listening_sockets()) - before
        port = f"{s.getsockname()[1]:04X}"
        assert any(addr.endswith(":" + port) for addr, _ in new), new


class _Engine:
    """A docker client stand-in for the leak check: lists what it is given, or fails."""

    def __init__(self, names: list[str] | None) -> None:
        self.names = names
        self.containers = self.networks = self

    def list(self, **_: object) -> list[object]:
        if self.names is None:
            raise ConnectionError("engine went away")
        return [type("Obj", (), {"name": n})() for n in self.names]


def test_detector_sees_docker_leftovers_and_fails_on_a_failed_listing() -> None:
    assert docker_leftovers(_Engine([])) == []
    assert docker_leftovers(_Engine(["sm-x-algo-1"])) == ["container sm-x-algo-1", "network sm-x-algo-1"]
    [problem] = docker_leftovers(_Engine(None))
    assert "could not list" in problem and "engine went away" in problem


def test_reap_keeps_trees_of_live_owners() -> None:
    import tempfile

    from emulator.kept.reap import reap_temp

    tree = Path(tempfile.mkdtemp(prefix="sm-emulator-qa-live-"))
    try:
        (tree / "owner").write_text(f"{os.getpid()}\n")
        assert not any(str(tree) in line for line in reap_temp())
        assert tree.exists()
    finally:
        import shutil

        shutil.rmtree(tree)


def test_shared_script_dirs_import_no_lightning() -> None:
    """The source dirs many jobs share import no Lightning: the preflight refuses a job whose source
    dir imports a package the job's Python lacks, and ``.ci/unprivileged``'s Python has no Lightning
    (its MPI and kept-host jobs run ``tests/scripts``). Lightning's scripts live in
    ``tests/scripts_lightning``."""
    from emulator.preflight import imported_modules

    tests = Path(__file__).parents[1]
    for shared in ("scripts", "scripts_deepspeed"):
        found = imported_modules(tests / shared) & {"lightning", "pytorch_lightning", "lightning_fabric"}
        assert not found, f"tests/{shared} imports {sorted(found)}: move that script to tests/scripts_lightning"
    assert imported_modules(tests / "scripts_lightning") & {"pytorch_lightning"}  # the check can see one


# --------------------------------------------------------------------------------------------
# No test passes without checking anything: a test whose only assertions sit inside a
# loop over a result passes with zero iterations when the job failed or its files were renamed.
# Such a test first asserts the job's status and the count (ranks, hosts, files) it iterates over.

#: ``"path::test"`` (``path::Class::test`` for methods) → why an empty loop is the point there.
LOOP_ONLY_ALLOWED: dict[str, str] = {}

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _never_empty(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    """A loop that runs at least once whatever the test's result: over a display with an element
    (``for host in ("algo-1", "algo-2")``), over ``range`` of constants that is not empty, or
    ``while True``."""
    if isinstance(loop, ast.While):
        return isinstance(loop.test, ast.Constant) and bool(loop.test.value)
    it = loop.iter
    if isinstance(it, (ast.Tuple, ast.List, ast.Set)):
        return any(not isinstance(e, ast.Starred) for e in it.elts)
    if isinstance(it, ast.Dict):
        return any(k is not None for k in it.keys)
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords:
        bounds = [a.value for a in it.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
        return len(bounds) == len(it.args) and 1 <= len(bounds) <= 3 and 0 not in bounds[2:] and \
            len(range(*bounds)) > 0
    return False


def _called_name(node: ast.AST) -> str | None:
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def _is_check(node: ast.AST, helpers: set[str]) -> bool:
    """An ``assert``, ``pytest.raises``/``pytest.fail``, or a call of a helper of the same module
    that checks something whenever it runs."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("raises", "fail"):
        return isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest"
    return _called_name(node) in helpers


def _checks(node: ast.AST, helpers: set[str], looped: bool = False) -> Iterator[bool]:
    """For each check in ``node`` (nested functions aside: they run only if called): whether it sits
    in the body of a loop that may run zero times. A loop's ``else`` and its iterable are not."""
    for field, value in ast.iter_fields(node):
        inside = looped or (isinstance(node, _LOOPS) and field == "body" and not _never_empty(node))
        for child in value if isinstance(value, list) else [value]:
            if not isinstance(child, ast.AST) or isinstance(child, _SCOPES):
                continue
            if _is_check(child, helpers):
                yield inside
            yield from _checks(child, helpers, inside)


def _test_functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    yield f"{node.name}::{item.name}", item


def loop_only_tests(source: str) -> tuple[list[str], int]:
    """The tests of ``source`` that assert something, but only inside loops that may run zero
    times; and how many tests there are."""
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    helpers: set[str] = set()
    while True:  # a helper that checks whenever it runs, also through another such helper
        more = {name for name, f in functions.items()
                if not name.startswith("test") and name not in helpers and not all(_checks(f, helpers))}
        if not more:
            break
        helpers |= more
    tests = list(_test_functions(tree))
    found = [name for name, f in tests if (inside := list(_checks(f, helpers))) and all(inside)]
    return found, len(tests)


def loop_only_in_suite(root: Path) -> tuple[list[str], int]:
    """``path::test`` of every such test of ``root/**/test_*.py``, and how many tests were read."""
    found: list[str] = []
    read = 0
    for path in sorted(root.rglob("test_*.py")):
        names, count = loop_only_tests(path.read_text())
        found += [f"{path.relative_to(root.parent).as_posix()}::{name}" for name in names]
        read += count
    return found, read


def test_no_test_asserts_only_in_a_loop_that_may_be_empty() -> None:
    found, read = loop_only_in_suite(Path(__file__).parents[1])
    assert read > 200, read  # the suite was read (480 test functions when this check was written)
    unexplained = [name for name in found if name not in LOOP_ONLY_ALLOWED]
    assert not unexplained, (
        "these tests assert only inside a loop that may run zero times, and pass when the job failed or its "
        "files were renamed: first assert the job's status and the count (ranks, hosts, files) iterated over, "
        "or list the test in LOOP_ONLY_ALLOWED with the reason an empty loop is the point:\n" + "\n".join(unexplained))
    assert sorted(set(LOOP_ONLY_ALLOWED) - set(found)) == [], "stale LOOP_ONLY_ALLOWED entries"


#: The shape to find: ``test_gpu_memory_is_the_instance_types`` before it checked the job.
ISSUE_37 = """
def _reports(result):
    return [json.loads(data) for name, data in sorted(result.model_files().items()) if name.startswith("rank-")]

def test_gpu_memory_is_the_instance_types(algo2_first):
    for report in _reports(algo2_first):
        assert report["total_memory"] == report["total"] == report["free"] == A100_40GB
"""


def test_the_loop_only_check_sees_the_issue_shape_and_what_fixes_it(tmp_path: Path) -> None:
    """Positive control: the loop-only shape is found (in a file of the suite's layout too), and
    asserting the status and the count before the loop is what clears it."""
    assert loop_only_tests(ISSUE_37) == (["test_gpu_memory_is_the_instance_types"], 1)
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "test_planted.py").write_text(ISSUE_37)
    (tmp_path / "tests" / "helpers.py").write_text(ISSUE_37)  # not a test module
    planted = "tests/sub/test_planted.py::test_gpu_memory_is_the_instance_types"
    assert loop_only_in_suite(tmp_path / "tests") == ([planted], 1)
    fixed = ISSUE_37.replace("    for report in _reports(algo2_first):", """\
    assert algo2_first.status == "Completed", algo2_first.failure_reason
    reports = _reports(algo2_first)
    assert len(reports) == 2  # 2 hosts x 1 GPU
    for report in reports:""")
    assert loop_only_tests(fixed) == ([], 1)


def test_the_loop_only_check_tells_the_loops_that_may_be_empty() -> None:
    source = '''
def reports(result):
    assert result.status == "Completed"
    return result.reports

def only_in_a_loop(result):
    for r in result.reports:
        assert r

def test_while(x):
    while x.more():
        assert x.next()

def test_raises_in_a_loop(cases):
    for case in cases:
        with pytest.raises(ValueError):
            parse(case)

def test_through_a_helper_that_checks_in_a_loop_only(result):
    only_in_a_loop(result)
    for r in result.reports:
        assert r

class TestGroup:
    def test_method(self, result):
        for r in result.reports:
            assert r

async def test_async(result):
    async for r in result:
        assert r

def test_a_nested_function_is_no_check(result):
    def check():
        assert result
    for r in result.reports:
        assert r

def test_empty_range_may_be_empty(result):
    for rank in range(0):
        assert rank

def test_literal_iterable(result):
    for host in ("algo-1", "algo-2"):
        assert result.log(host)

def test_range_of_constants(result):
    for rank in range(4):
        for key in ["a"]:
            assert result.rank(rank)[key]

def test_through_a_helper_that_checks(result):
    for r in reports(result):
        assert r

def test_after_the_loop(result):
    for r in result.reports:
        assert r
    assert len(result.reports) == 2

def test_in_the_else_of_the_loop(result):
    for r in result.reports:
        assert r
    else:
        assert result.reports

def test_fail_outside(result):
    for r in result.reports:
        assert r
    if not result.reports:
        pytest.fail("no reports")

def test_no_assert_at_all(result):
    for r in result.reports:
        print(r)

def helper_not_a_test(result):
    for r in result.reports:
        assert r
'''
    assert loop_only_tests(source) == (
        ["test_while", "test_raises_in_a_loop", "test_through_a_helper_that_checks_in_a_loop_only",
         "TestGroup::test_method", "test_async", "test_a_nested_function_is_no_check",
         "test_empty_range_may_be_empty"], 14)
