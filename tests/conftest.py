"""Test hygiene: every test must leave no process, container, listening port or temp tree behind.

Scoping (holds under pytest-xdist, where several workers run jobs at once):

* At start-up each pytest process (controller or xdist worker) exports ``SMEMU_TEST_OWNER=<pid>``.
  The emulator passes the machine's environment into its namespace agent and hosts (only
  credentials and launcher variables are dropped, see :mod:`emulator.job.plan`), so every process a
  test starts, directly or through ``python -m emulator``, carries it, even after it has been
  re-parented. A leak is any live process (not a zombie) carrying our value, or a descendant of
  this process, that was not there before the test.
* ``TMPDIR`` (and :data:`tempfile.tempdir`) points at a private folder per pytest process, so a
  new ``sm-emulator-*`` tree there is ours. pytest's own ``tmp_path`` root stays where it was
  (``PYTEST_DEBUG_TEMPROOT``).
* Listening TCP sockets in this machine's network namespace (``/proc/net/tcp{,6}``) that are new
  and belong to one of our processes.
* Docker containers and networks labelled ``sagemaker-emulator.owner-pid=<this pid>``, checked
  when the docker SDK imports and an engine answers its ping (no engine: nothing to check); an
  engine that answers but fails to list them fails the check.

Leaked processes are killed after the check so one bad test does not poison the next ones.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import resource
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.inhost.protocol import proc_cmdline, proc_environ, proc_stat
from emulator.job.profiles import CI, PROFILE_VAR

OWNER_VAR = "SMEMU_TEST_OWNER"
OWNER = str(os.getpid())
#: How long a test's processes may take to disappear after the test returns.
LEAK_GRACE = 5.0
_STATE: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    os.environ[OWNER_VAR] = OWNER
    # A suite started in the background (`nohup … &`, a CI agent) inherits SIGINT ignored, and
    # every emulator a test starts would inherit that too: a test's Ctrl-C (SIGINT) would then be
    # lost, as a shell means it to be for background jobs. Tests send SIGINT as a user's terminal
    # does, to a foreground emulator: restore Python's handler (children then get the default).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # SDK launchers always name a DLC (framework_version or image_uri); the suite runs them with
    # today's torch unless a test asks otherwise (tests/jobs/test_framework_jobs.py does).
    os.environ.setdefault("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", "current")
    # Jobs that choose no profile run in ``ci``, as the pytest fixture's do: it changes nothing a
    # script can observe but time (tests/jobs/test_profiles_equivalence.py runs every distribution
    # in both profiles and compares all of it) and saves each host the toolkit's ``import torch``,
    # the MPI runners' 30-s sleeps and the timeline picture. A test of ``exact`` itself says so.
    os.environ.setdefault(PROFILE_VAR, CI)
    original = tempfile.gettempdir()
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", original)
    private = tempfile.mkdtemp(prefix=f"smemu-tests-{OWNER}-", dir=original)
    _STATE["tmp"] = private
    os.environ["TMPDIR"] = private
    tempfile.tempdir = private


#: The kind of test each folder of tests/ holds (``docs/contributing.md``), applied as a marker by folder:
#: ``-m unit`` is the loop to run while editing (``nox -s unit``).
FOLDER_KINDS = {
    "unit": "unit",  # no host started, no engine, no network namespace: pure functions, fakes, plans
    "jobs": "jobs",  # starts real jobs on the process backend
    "docker": "docker",  # needs a docker engine (and the emulator's image)
}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's kind; a test module outside the kind folders is an error,
    so the tree keeps showing which tests start jobs."""
    for item in items:
        try:
            parts = item.path.resolve().relative_to(TESTS).parts
        except ValueError:
            continue  # a test outside tests/ (tests/jobs/test_pytest_plugin.py runs pytest on its own files)
        kind = FOLDER_KINDS.get(parts[0]) if len(parts) > 1 else None
        if kind is None:
            raise pytest.UsageError(f"{item.nodeid}: a test module belongs in one of tests/"
                                    f"{{{','.join(FOLDER_KINDS)}}}/ (docs/contributing.md)")
        item.add_marker(kind)


#: Seconds each test took (setup + call + teardown), from the reports (the controller's under xdist).
_TEST_SECONDS: dict[str, float] = {}


#: How many of the costliest test modules the summary lists (where a cut saves the most).
SLOWEST_MODULES = 15


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--test-budget", type=float, default=None, metavar="SECONDS",
                     help="list the tests that took longer than SECONDS (setup, call and teardown together)")
    parser.addoption("--test-budget-strict", action="store_true",
                     help="with --test-budget: a test over it fails the run (a dedicated runner; on a shared, "
                          "noisy machine it is a timed assertion)")


#: The ``user_properties`` key of a test's teardown report that holds its CPU-seconds (set on the
#: worker that ran it; the summary adds them up per module).
CPU_PROPERTY = "cpu_seconds"
_CPU_AT_START: dict[str, float] = {}


def _cpu_now() -> float:
    """This process's CPU-seconds plus its reaped descendants': a process-backend job's hosts are waited
    for link by link, so their trees count; a docker container's processes (the engine's) do not."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _CPU_AT_START[nodeid] = _cpu_now()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    start = _CPU_AT_START.pop(item.nodeid, None) if call.when == "teardown" else None
    if start is not None:  # the whole test: setup (its share of module fixtures too), call, teardown
        report.user_properties.append((CPU_PROPERTY, round(_cpu_now() - start, 2)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TEST_SECONDS[report.nodeid] = _TEST_SECONDS.get(report.nodeid, 0.0) + report.duration


def over_budget(seconds: dict[str, float], budget: float) -> list[tuple[str, float]]:
    """The tests over ``budget`` seconds, slowest first."""
    return sorted(((n, t) for n, t in seconds.items() if t > budget), key=lambda item: -item[1])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    budget = session.config.getoption("--test-budget", None)
    if budget and session.config.getoption("--test-budget-strict", False) and exitstatus == 0 \
            and over_budget(_TEST_SECONDS, budget):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The outcome counts per kind folder (where the suite's tests and time are)."""
    counts: dict[str, dict[str, int]] = {}
    seconds: dict[str, float] = {}
    modules: dict[str, float] = {}  # the worker-seconds of each test module (setup, call, teardown)
    cpu: dict[str, float] = {}  # and its CPU-seconds (CPU_PROPERTY)
    for outcome in ("passed", "failed", "skipped", "error", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if not nodeid.startswith("tests/"):
                continue
            folder = nodeid.split("/")[1] if nodeid.count("/") > 1 else "?"
            counts.setdefault(folder, {}).setdefault(outcome, 0)
            counts[folder][outcome] += 1
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            if nodeid.startswith("tests/") and nodeid.count("/") > 1 and hasattr(report, "duration"):
                folder, module = nodeid.split("/")[1], nodeid.split("::")[0]
                seconds[folder] = seconds.get(folder, 0.0) + report.duration
                modules[module] = modules.get(module, 0.0) + report.duration
                for key, value in getattr(report, "user_properties", ()):
                    if key == CPU_PROPERTY:
                        cpu[module] = cpu.get(module, 0.0) + float(value)
    budget = terminalreporter.config.getoption("--test-budget", None)
    slow = over_budget(_TEST_SECONDS, budget) if budget else []
    if slow:
        strict = terminalreporter.config.getoption("--test-budget-strict", False)
        terminalreporter.write_sep("-", f"{len(slow)} tests over the {budget:.0f}-s budget"
                                   + (" (this fails the run)" if strict else ""))
        for nodeid, took in slow:
            terminalreporter.write_line(f"{took:7.1f} s  {nodeid}")
    if counts:
        terminalreporter.write_sep("-", "tests per folder")
        for folder in sorted(counts):
            outcomes = ", ".join(f"{n} {what}" for what, n in sorted(counts[folder].items()))
            terminalreporter.write_line(f"tests/{folder:<8} {sum(counts[folder].values()):>5}  ({outcomes}; "
                                        f"{seconds.get(folder, 0.0):.0f} worker-seconds)")
    # Costliest by CPU (the suite is CPU-bound: its workers outnumber the cores), else by worker-seconds.
    costly = sorted(modules, key=lambda m: (-cpu.get(m, 0.0), -modules[m]))[:SLOWEST_MODULES]
    if len(modules) > 1 and costly:
        total = sum(cpu.values())
        terminalreporter.write_sep("-", f"the {len(costly)} costliest modules (CPU-seconds and share of all "
                                        "tests' (docker containers' not counted), worker-seconds)")
        for module in costly:
            used = cpu.get(module, 0.0)
            terminalreporter.write_line(f"{used:7.0f} CPU-s {100 * used / total if total else 0.0:5.1f} %"
                                        f" {modules[module]:7.0f} s  {module}")


def pytest_unconfigure(config: pytest.Config) -> None:
    private = _STATE.get("tmp")
    if private and not any(Path(private).glob("sm-emulator-*")):
        shutil.rmtree(private, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# /proc helpers


def our_processes(*, by_ancestry: bool = True) -> dict[int, str]:
    """Live processes that belong to this pytest process: descendants (unless ``by_ancestry`` is
    False), or carrying our owner variable. Value: a one-line description for failure messages."""
    me = os.getpid()
    parents: dict[int, int] = {}
    states: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                parents[stat.pid], states[stat.pid] = stat.ppid, stat.state
    out: dict[int, str] = {}
    for pid, state in states.items():
        if pid == me or state in ("Z", "X"):
            continue
        p, hops = parents.get(pid), 0
        descendant = False
        while by_ancestry and p is not None and p > 1 and hops < 256:
            if p == me:
                descendant = True
                break
            p, hops = parents.get(p), hops + 1
        env = proc_environ(pid) if not descendant else {}
        if descendant or env.get(OWNER_VAR) == OWNER:
            env = env or proc_environ(pid)
            job = env.get("TRAINING_JOB_NAME")
            cmd = " ".join(proc_cmdline(pid)) or "?"
            out[pid] = f"{pid} [{state}] {cmd[:160]}" + (f" (job {job})" if job else "")
    return out


def listening_sockets() -> dict[tuple[str, str], str]:
    """LISTEN TCP sockets in this network namespace: (local address:port, inode) → family."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":
                out[(fields[1], fields[9])] = name
    return out


def socket_owners(inodes: set[str]) -> dict[str, int]:
    """Which PID holds each socket inode (scan of /proc/*/fd)."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                found[link[8:-1]] = int(entry)
    return found


def docker_leftovers(client: Any = None) -> list[str]:
    """Containers and networks labelled with our owner pid. No engine (or no docker SDK): nothing
    to check. An engine that answers its ping but fails the listing is a problem, not a pass."""
    if client is None:
        if not (Path("/var/run/docker.sock").exists() or os.environ.get("DOCKER_HOST")):
            return []
        try:
            import docker  # type: ignore[import-not-found]

            client = docker.from_env(timeout=3)
            client.ping()
        except Exception:
            return []
    label = f"sagemaker-emulator.owner-pid={OWNER}"
    try:
        found = client.containers.list(all=True, ignore_removed=True, filters={"label": label})
        containers = [f"container {c.name}" for c in found]
        networks = [f"network {n.name}" for n in client.networks.list(filters={"label": label})]
    except Exception as exc:
        return [f"docker engine answered but could not list containers/networks labelled {label}: "
                f"{type(exc).__name__}: {exc}"]
    return containers + networks


def _temp_trees() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("sm-emulator-*")}


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(autouse=True)
def no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves a process, container, listening port or temp tree behind."""
    procs_before = set(our_processes())
    sockets_before = set(listening_sockets())
    trees_before = _temp_trees()
    yield
    deadline = time.monotonic() + LEAK_GRACE
    while True:
        leaked = {p: d for p, d in our_processes().items() if p not in procs_before}
        if not leaked or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    problems = [f"process {d}" for d in leaked.values()]
    new_sockets = {k for k in listening_sockets() if k not in sockets_before}
    if new_sockets:
        ours = set(our_processes()) | {os.getpid()}
        owners = socket_owners({inode for _, inode in new_sockets})
        for addr, inode in sorted(new_sockets):
            if owners.get(inode) in ours:
                problems.append(f"listening socket {addr} (pid {owners[inode]})")
    problems += [f"temp tree {tempfile.gettempdir()}/{n}" for n in sorted(_temp_trees() - trees_before)]
    problems += docker_leftovers()
    _kill(set(leaked))
    if problems:
        pytest.fail(f"{request.node.nodeid} left behind:\n  " + "\n  ".join(problems), pytrace=False)


def require(what: str, missing: list[str]) -> None:
    """Skip the calling test when ``missing`` names something ``what`` needs, with the reason;
    under ``CI=true`` fail instead: CI must have provisioned it (``.ci/setup``)."""
    if not missing:
        return
    reason = f"{what} needs {', '.join(missing)}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def import_or_skip(name: str) -> Any:
    """``pytest.importorskip``, except under ``CI=true``, where a missing module is an error: CI
    installs every extra the tests use (``nox -s tests``)."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(name)
    return pytest.importorskip(name)


def mpi_missing() -> list[str]:
    """What an MPI-family job on the process backend needs and this machine lacks: Open MPI's
    ``mpirun`` and ``mpi4py`` (the toolkit runs ``mpirun … python -m mpi4py``); as root also
    ``sshd`` and ``ssh-keygen``, because every host then runs a real sshd (emulator/backends/process/sshd.py)."""
    from emulator.backends.process import sshd

    missing = []
    if shutil.which("mpirun") is None:
        missing.append("Open MPI's mpirun")
    if importlib.util.find_spec("mpi4py") is None:
        missing.append("mpi4py")
    if os.geteuid() == 0:
        if not Path(sshd.SSHD).is_file():
            missing.append(f"{sshd.SSHD} (openssh-server)")
        if shutil.which(sshd.KEYGEN) is None:
            missing.append(f"{sshd.KEYGEN} (openssh-client)")
    return missing


def require_mpi() -> None:
    """For tests and fixtures (any scope) that run MPI-family jobs: see :func:`require`."""
    require("an MPI-family job on the process backend", mpi_missing())


@pytest.fixture
def mpi_ready() -> None:
    """Fixture form of :func:`require_mpi` (for ``pytest.mark.usefixtures``)."""
    require_mpi()


@pytest.fixture
def docker_ready() -> None:
    """The docker backend can run here (engine and image): see :func:`require`."""
    from emulator.backends.docker.backend import DockerBackend
    from emulator.errors import BackendUnavailable

    try:
        DockerBackend().check()
    except BackendUnavailable as exc:
        require("the docker backend", [f"a working engine and image ({exc})"])
