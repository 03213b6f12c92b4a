"""A fake backend and a fake clock, so the supervisor's policies run in milliseconds.

:class:`FakeBackend` implements :class:`emulator.backends.base.Backend` with hosts that follow a
script (:class:`HostScript`: exit with a status at a time, ignore or obey SIGTERM), on a
:class:`FakeClock` that advances only when the supervisor sleeps or a teardown waits. Everything
else the supervisor does is real: the plan, the host trees, the logs, the archives, ``job.json``.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.backends.base import HostLaunch, LaunchSpec, Runtime, World, host_addresses, hosts_file
from emulator.backends.materialise import host_mounts
from emulator.inhost.protocol import HostExit, exit_of, status_of_signal
from emulator.job.plan import JobPlan
from emulator.job.request import JobRequest


class FakeClock:
    """Monotonic time starts at 0; wall time at a fixed epoch. ``sleep`` advances both."""

    EPOCH = 1_800_000_000.0

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.EPOCH + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class HostScript:
    """What a fake host does: exit with ``status`` at ``exit_at`` (None: run until stopped);
    on SIGTERM exit at once with 128+15 when ``obeys_sigterm`` (the toolkit does not)."""

    exit_at: float | None = None
    status: int = 0
    obeys_sigterm: bool = False


class FakeHost:
    def __init__(self, name: str, script: HostScript, clock: FakeClock) -> None:
        self.name = name
        self.script = script
        self.clock = clock
        self.signals: list[int] = []
        self._status: int | None = None
        self._sent: set[int] = set()

    def poll(self) -> HostExit | None:
        if self._status is None and self.script.exit_at is not None and self.clock.now >= self.script.exit_at:
            self._status = self.script.status
        return None if self._status is None else exit_of(self._status, self._sent)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.poll() is not None:
            return
        self.signals.append(sig)
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and self.script.obeys_sigterm):
            self._sent.add(sig)
            self._status = status_of_signal(sig)

    def pids(self) -> list[int]:
        return []


class FakeJob:
    def __init__(self, spec: LaunchSpec, scripts: Mapping[str, HostScript], clock: FakeClock) -> None:
        self.spec = spec
        self.clock = clock
        self.hosts = {h.name: FakeHost(h.name, scripts.get(h.name, HostScript()), clock) for h in spec.hosts}
        self.teardowns: list[float] = []
        self.disconnected: list[str] = []
        self.kept: list[str] = []

    def disconnect(self, host: str) -> None:
        self.disconnected.append(host)

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["true"]

    def keep(self) -> dict[str, Any]:
        """``--keep-hosts``: the running hosts get SIGSTOP and teardown leaves them alone."""
        self.kept = [name for name, h in self.hosts.items() if h.poll() is None]
        for name in self.kept:
            self.hosts[name].signals.append(signal.SIGSTOP)
        return {"hosts": {name: {} for name in self.kept}}

    def teardown(self, grace: float) -> None:
        self.teardowns.append(grace)
        running = [h for h in self.hosts.values() if h.poll() is None and h.name not in self.kept]
        for h in running:
            h.signal(signal.SIGTERM)
        if any(h.poll() is None for h in running):
            self.clock.sleep(grace)
        for h in running:
            h.signal(signal.SIGKILL)


@dataclass
class FakeBackend:
    """``attempts[i]`` scripts the hosts of the i-th start (the last one repeats)."""

    clock: FakeClock
    attempts: list[dict[str, HostScript]] = field(default_factory=lambda: [{}])
    jobs: list[FakeJob] = field(default_factory=list)
    name: str = "fake"
    fast_start: bool = False
    shares_machine_filesystem: bool = False
    #: Lines each host's log holds once it has started (the log tailer hands them to observers).
    lines: dict[str, list[str]] = field(default_factory=dict)

    def check(self, *, request: JobRequest | None = None) -> None:
        pass

    def runtime(self, *, python: str | None = None, request: JobRequest | None = None) -> Runtime:
        return Runtime(python="python3", train_command=("train",), inhost_root="/inhost", base_env={},
                       path="/usr/bin:/bin")

    def job_python(self, request: JobRequest) -> str | None:
        return None

    def prepare(self, request: JobRequest, *, say: Callable[[str], None]) -> list[str]:
        return []

    def prepare_python(self, request: JobRequest, *, scratch: Path, log: Path,
                       env: Mapping[str, str]) -> str | None:
        return None

    def job_world(self, request: JobRequest) -> World | None:
        return None  # no packages: the fake hosts run no Python

    def launch_spec(self, plan: JobPlan, *, job_id: str, scratch: Path, logs: Path) -> LaunchSpec:
        addresses = host_addresses("10.0.0.0/24", [h.name for h in plan.hosts])
        return LaunchSpec(backend=self.name, job_id=job_id, subnet="10.0.0.0/24", scratch=scratch, hosts=tuple(
            HostLaunch(name=h.name, address=addresses[h.name], command=tuple(h.command), env=dict(h.env),
                       workdir="/opt/ml/code", mounts=host_mounts(plan, h.name), hosts_file=hosts_file(addresses),
                       log_path=logs / f"{h.name}.log", argv=()) for h in plan.hosts))

    def start(self, spec: LaunchSpec) -> FakeJob:
        scripts = self.attempts[min(len(self.jobs), len(self.attempts) - 1)]
        job = FakeJob(spec, scripts, self.clock)
        self.jobs.append(job)
        for h in spec.hosts:
            with open(h.log_path, "a") as log:
                log.writelines(line + "\n" for line in self.lines.get(h.name, ()))
        return job
