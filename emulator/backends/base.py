"""The backend interface: start a job's hosts, hand back handles, tear everything down.

A backend knows nothing of SageMaker. It receives :class:`HostSpec` values (already planned and
materialised: the per-host ``/opt/ml`` folder, environment, command, address, ``/etc/hosts``
text) and runs each as an isolated host. Two implementations: ``process`` (Linux namespaces,
default) and ``docker`` (one container per host). They load lazily through
:func:`emulator.backends.get_backend`, so ``import emulator`` never imports ``docker``.

Return codes follow :mod:`subprocess`: ``>= 0`` is an exit status, ``< 0`` the signal number.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Mount:
    """A bind mount into the host: ``source`` (this machine) at ``target`` (inside the host)."""

    source: Path
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class HostSpec:
    """Everything a backend needs to start one emulated host."""

    name: str  # algo-N
    address: str  # its eth0 address on the job network
    opt_ml: Path  # this host's /opt/ml tree on the machine, mounted at /opt/ml
    env: Mapping[str, str]  # the container environment (platform + image env)
    command: Sequence[str]  # e.g. ["train"]
    workdir: str  # cwd inside the host
    hosts_file: str  # full text of the host's /etc/hosts
    log_path: Path  # stdout+stderr of the host go here
    mounts: Sequence[Mount] = ()  # extra binds (channels, checkpoints, in-host package)
    image: str | None = None  # docker backend only
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSpec:
    """A job as the backend sees it: a name, a private network, and its hosts."""

    job_id: str  # unique per run on this machine (job name + short random suffix)
    hosts: Sequence[HostSpec]
    scratch: Path  # a folder the backend may use for its own files; removed by the supervisor
    subnet: str = "10.0.0.0/24"
    allow_egress: bool = False


class HostHandle(Protocol):
    """A running host. Methods never raise for a host that has already exited."""

    name: str

    def poll(self) -> int | None:
        """The host's return code, or None while it runs."""

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to every process of the host (SIGSTOP/SIGCONT freeze and thaw it)."""

    def pids(self) -> list[int]:
        """PIDs (as seen on this machine) of the host's processes, for diagnostics and faults."""


class JobHandle(Protocol):
    """The running job: its hosts, and the means to cut, enter and tear it down."""

    hosts: Mapping[str, HostHandle]

    def disconnect(self, host: str) -> None:
        """Cut ``host`` off the job network (its link goes down); processes keep running."""

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """An argv that runs ``argv`` inside ``host`` (its namespaces or container) from here."""

    def teardown(self, grace: float) -> None:
        """SIGTERM every host, wait up to ``grace`` seconds, SIGKILL the rest, free the network.

        Idempotent; after it returns no process, container or network of the job is left.
        """


class Backend(Protocol):
    """Starts jobs. ``check()`` raises :class:`~emulator.errors.BackendUnavailable` with a hint."""

    name: str
    #: Where the emulator's in-host folder (``emulator/inhost``: ``bin/`` and ``site/``) is seen
    #: from inside a host.
    inhost_root: str

    def check(self) -> None: ...

    def base_env(self) -> dict[str, str]:
        """The environment a host starts from before the platform's variables are added.

        Process backend: this machine's environment without AWS credentials or launcher
        variables. Docker backend: empty (the image's ``ENV`` applies).
        """

    def train_command(self) -> list[str]:
        """The container command: what ``docker run IMAGE train`` runs in a DLC."""

    def inhost_mounts(self) -> list[Mount]:
        """Extra mounts every host needs for the in-host package (empty where not needed)."""

    def start(self, job: JobSpec) -> JobHandle:
        """Start every host of ``job``. On failure, undo the partial start, then raise."""
