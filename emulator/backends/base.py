"""The backend interface: plan → launch spec (pure) → running hosts → teardown.

A backend turns a :class:`~emulator.job.plan.JobPlan` (SageMaker's view of every host: files,
environment, container command) into a :class:`LaunchSpec` — each host's final argv, environment,
address, hostname, mounts and ``/etc/hosts``, *including* everything the backend itself adds —
without side effects, then starts exactly that spec. ``python -m emulator plan`` prints the
launch spec, so what it shows is what runs.

Two implementations: ``process`` (Linux namespaces, default) and ``docker`` (one container per
host). They load lazily through :func:`emulator.backends.get_backend`, so ``import emulator``
never imports ``docker``.

Exit statuses follow containers: a host's PID 1 ends with a status 0-255 (128+N when killed by
signal N); :class:`~emulator.inhost.protocol.HostExit` keeps the signal apart when the emulator
itself sent it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..inhost.protocol import HostExit
from ..job.plan import JobPlan, Runtime
from ..job.request import JobRequest

#: The backend choice that probes this machine and picks one (:mod:`emulator.backends.choose`).
AUTO = "auto"


@dataclass(frozen=True)
class Mount:
    """A bind mount into the host: ``source`` (this machine) at ``target`` (inside the host)."""

    source: Path
    target: str
    read_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "target": self.target, "read_only": self.read_only}


@dataclass(frozen=True)
class HostLaunch:
    """One host exactly as the backend starts it."""

    name: str  # algo-N: hostname, and the name every host resolves
    address: str  # its eth0 address on the job network
    command: tuple[str, ...]  # the container command: PID 1 inside the host
    env: Mapping[str, str]  # PID 1's complete environment
    workdir: str  # cwd of PID 1
    mounts: tuple[Mount, ...]  # /opt/ml first, then channels, checkpoints, the in-host folder …
    hosts_file: str  # full text of the host's /etc/hosts
    log_path: Path  # stdout+stderr of the host go here
    #: What runs: process backend, the command line this machine executes to make the host;
    #: docker backend, the container's process (the image's ENTRYPOINT followed by ``command``).
    argv: tuple[str, ...]
    image: str | None = None  # docker backend: the image
    labels: Mapping[str, str] = field(default_factory=dict)  # what the backend labels the host with

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "hostname": self.name,
                "image": self.image, "command": list(self.command), "workdir": self.workdir,
                "environment": dict(self.env), "mounts": [m.to_dict() for m in self.mounts],
                "hosts_file": self.hosts_file, "log": str(self.log_path),
                **({"argv": list(self.argv)} if self.argv else {}),
                **({"labels": dict(self.labels)} if self.labels else {})}


@dataclass(frozen=True)
class LaunchSpec:
    """A whole job as the backend starts it: its private network and every host."""

    backend: str
    job_id: str  # unique per run on this machine (job name + short random suffix)
    subnet: str  # the job network
    hosts: tuple[HostLaunch, ...]
    scratch: Path  # the backend's own files (removed by the supervisor)
    allow_egress: bool = False
    #: Backend-specific facts the start needs and a reader should see (e.g. which sshd hosts get).
    options: Mapping[str, Any] = field(default_factory=dict)

    def host(self, name: str) -> HostLaunch:
        return next(h for h in self.hosts if h.name == name)

    @property
    def image(self) -> str | None:
        """The image the hosts run (None: the backend runs no image)."""
        return self.hosts[0].image if self.hosts else None

    @property
    def diag_dir(self) -> Path:
        """This machine's folder that every host sees as ``EMULATOR_DIAG_DIR``."""
        return diag_folder(self.scratch)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "job_id": self.job_id, "network": self.subnet,
                "egress": self.allow_egress, "options": dict(self.options), "scratch": str(self.scratch),
                "hosts": [h.to_dict() for h in self.hosts]}


@dataclass(frozen=True)
class World:
    """What a job can import, read from what is installed (never guessed from names): the
    top-level modules of the DLC image's packages as the backend installed them, and of what the
    job's ``requirements.txt`` installed on top (see :mod:`emulator.preflight`)."""

    modules: frozenset[str]
    requirements: frozenset[str] = frozenset()


class HostHandle(Protocol):
    """A running host. Methods never raise for a host that has already exited; ``signal`` does
    nothing to a host that :meth:`JobHandle.keep` handed off."""

    name: str

    def poll(self) -> HostExit | None:
        """How the host's PID 1 ended, or None while it runs."""

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the host: SIGTERM to its PID 1 (as ``docker stop``), SIGKILL, SIGSTOP
        and SIGCONT to every process of it (SIGSTOP/SIGCONT freeze and thaw it)."""

    def pids(self) -> list[int]:
        """PIDs (as seen on this machine) of the host's processes, for diagnostics and faults."""


class JobHandle(Protocol):
    """The running job: its hosts, and the means to cut, enter and tear it down."""

    hosts: Mapping[str, HostHandle]

    def disconnect(self, host: str) -> None:
        """Cut ``host`` off the job network (its link goes down); processes keep running."""

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """An argv that runs ``argv`` inside ``host`` (its namespaces or container) from here."""

    def keep(self) -> Mapping[str, Any]:
        """Hand the hosts that still run over to ``python -m emulator shell|ps|reap``
        (``--keep-hosts``; see :mod:`emulator.kept.records`): freeze every process of them (SIGSTOP) and
        let them outlive this process. Returns ``{"hosts": {name: facts}, ...}``, the
        backend's facts that find them again (empty ``hosts``: nothing ran, nothing was kept, and
        :meth:`teardown` works as usual). After a keep, :meth:`teardown` leaves the job alone."""

    def teardown(self, grace: float) -> None:
        """SIGTERM every host, wait up to ``grace`` seconds, SIGKILL the rest, free the network.

        Idempotent; after it returns no process, container or network of the job is left
        (unless :meth:`keep` handed them off).
        """


class KeptHosts(Protocol):
    """The hosts of a kept job (``--keep-hosts``, see :mod:`emulator.kept.records`), found again from the
    facts :meth:`JobHandle.keep` returned (``record``: the job's ``kept.json``), by a later
    ``python -m emulator shell|ps|reap`` process. Methods take a host the record names as kept."""

    def gone(self, host: str) -> str | None:
        """Why ``host`` can no longer be entered (it has exited since it was kept, how), or None
        while it still exists."""

    def exec_argv(self, host: str, command: Sequence[str], *, terminal: bool,
                  env: Mapping[str, str] | None) -> tuple[list[str], dict[str, str]]:
        """The argv (``argv[0]`` an absolute path where it is found) and environment that run
        ``command`` inside ``host``, from this machine. ``env``: the environment the host's PID 1
        started with (``launch-spec.json``; None when it cannot be read), for backends that enter
        a host without its own environment; ``terminal``: the caller has a terminal. Raises
        :class:`~emulator.errors.RequestError` when the host cannot be entered from here."""

    def pids(self, host: str) -> list[int]:
        """PIDs (as seen on this machine) of every process of ``host``; raises
        :class:`~emulator.errors.RequestError` when they are not visible here."""

    def remove(self) -> list[str]:
        """Remove every host of the job (processes, containers, network); one line per removal
        for people. Idempotent."""


class Backend(Protocol):
    """Starts jobs. ``check()`` raises :class:`~emulator.errors.BackendUnavailable` with a hint.

    Capabilities (what code outside the backends asks instead of the backend's name):
    ``fast_start``: ranks can be forked from a pre-imported interpreter (the profile's fast
    start applies); ``shares_machine_filesystem``: hosts see this machine's filesystem outside the
    folders the spec mounts (so a mount point may have to be created on this machine).
    """

    name: str
    fast_start: bool
    shares_machine_filesystem: bool

    def check(self, *, request: JobRequest | None = None) -> None:
        """Raise :class:`~emulator.errors.BackendUnavailable` when this backend cannot run
        ``request`` (or any job) here, before anything is prepared."""

    def runtime(self, *, python: str | None = None, request: JobRequest | None = None) -> Runtime:
        """The image's facts for planning; ``python``: the job environment's interpreter (process
        backend: a venv for ``requirements.txt``; ignored where the image brings its own);
        ``request``: the job, whose framework version decides the image (docker) and the toolkit."""

    def prepare(self, request: JobRequest, *, say: Callable[[str], None]) -> list[str]:
        """Ready what the job needs before anything of it is written or started, once per job
        (docker: build the framework image, resolve the wheelhouse; process: nothing but the
        checks). Raises :class:`~emulator.errors.RequestError` for a framework this backend
        cannot run, :class:`~emulator.errors.BackendUnavailable` when the preparation fails;
        ``say`` gets progress lines for people. Returns warnings for ``job.json``. Afterwards
        ``launch_spec`` finds everything ready (it reads, never builds)."""

    def job_python(self, request: JobRequest) -> str | None:
        """The interpreter ``prepare_python`` gives this job, predicted without side effects."""

    def job_world(self, request: JobRequest) -> World | None:
        """What the job can import (:class:`World`), once what the backend installs for it is there
        (process: the framework layers and the job environment; docker: the image and the
        wheelhouse); None before. Reads only."""

    def prepare_python(self, request: JobRequest, *, scratch: Path, log: Path, env: Mapping[str, str]) -> str | None:
        """Make the job's interpreter ready where the backend runs hosts on this machine's Python
        (a venv for ``requirements.txt``; ``env``: the hosts' environment, for pip); None where
        the image brings its own."""

    def launch_spec(self, plan: JobPlan, *, job_id: str, scratch: Path, logs: Path) -> LaunchSpec:
        """Every host's final launch, computed without side effects (it may read, e.g. which
        subnets are taken). ``scratch``: the folder the backend may use; ``logs``: where
        ``<host>.log`` files go."""

    def start(self, spec: LaunchSpec) -> JobHandle:
        """Start exactly ``spec``. On failure, undo the partial start, then raise."""

    def attach(self, record: Mapping[str, Any]) -> KeptHosts:
        """The kept hosts ``record`` (a kept job's ``kept.json``, written by this backend's
        :meth:`JobHandle.keep` facts) describes. Never raises for hosts that are gone."""

    def reap_leftovers(self, scratch: Path, *, job_name: str, owner_pid: int) -> list[str]:
        """Remove every host a run of ``job_name`` whose emulator (``owner_pid``) is gone left
        below ``scratch`` (its scratch folder): the emulator was killed before it wrote a kept
        record, or before its teardown. One line per removal (or why nothing could be looked at);
        nothing when the backend has nothing of that run here. The caller removes ``scratch``."""

    def reap_orphans(self) -> list[str]:
        """Remove, machine-wide, what runs of this backend whose emulator is gone left (kept
        hosts whose record is missing, containers, networks, helper containers). One line per
        removal (or why nothing could be looked at)."""


class SubnetTaken(Exception):
    """Raised by ``start`` when the spec's subnet was taken after the spec was made (a concurrent
    job); the supervisor makes a new spec and starts again."""


def diag_folder(scratch: Path) -> Path:
    """The folder under a spec's ``scratch`` that a backend mounts as every host's
    ``EMULATOR_DIAG_DIR`` (the ranks' diagnostics records; read by the observers)."""
    return scratch / "diagnostics"


def hosts_file(addresses: Mapping[str, str]) -> str:
    """``/etc/hosts`` of every host of a job: localhost and every ``algo-N`` at its address."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"{address}\t{name}" for name, address in addresses.items()]
    return "\n".join(lines) + "\n"


def host_addresses(subnet: str, hosts: Sequence[str]) -> dict[str, str]:
    """``algo-N`` gets the (N+1)-th address of ``subnet`` (algo-1: ``.2``), whatever the order."""
    import ipaddress

    base = int(ipaddress.ip_network(subnet).network_address)
    return {h: str(ipaddress.ip_address(base + int(h.rsplit("-", 1)[1]) + 1)) for h in hosts}
