"""The job's result: DescribeTrainingJob's shape in ``job.json``, plus the emulator's own facts.

:class:`JobResult` is what every front end returns (CLI, Python API, pytest fixture, SDK session).
SageMaker's fields sit at the top level of :attr:`JobResult.description`; what only the emulator
knows (per-host exit codes and log paths, diagnostics, warnings) sits under ``Emulator``.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..console import tail
from ..inhost.protocol import HostExit

#: SageMaker reports at most this many characters of the failure file.
FAILURE_REASON_LIMIT = 1024


@dataclass(frozen=True)
class Transition:
    status: str
    start: float
    end: float | None
    message: str | None  # None where SageMaker's text is not known

    def to_dict(self) -> dict[str, Any]:
        d = {"Status": self.status, "StartTime": iso(self.start)}
        if self.message is not None:
            d["StatusMessage"] = self.message
        if self.end is not None:
            d["EndTime"] = iso(self.end)
        return d


@dataclass(frozen=True)
class HostOutcome:
    """How one host ended."""

    name: str
    exit: HostExit | None  # None: never started, or still running when the job ended
    log: Path
    ended_at: float | None
    failure: str | None  # its /opt/ml/output/failure, if any

    @property
    def exit_code(self) -> int | None:
        """The container's exit status (128+N when PID 1 died of signal N), as SageMaker sees it."""
        return None if self.exit is None else self.exit.status

    @property
    def signal(self) -> int | None:
        """The signal that killed PID 1, when the emulator delivered it; else None."""
        return None if self.exit is None else self.exit.signal

    @property
    def how(self) -> str:
        return "not started" if self.exit is None else self.exit.describe()


@dataclass(frozen=True)
class Diagnostic:
    """A finding about the job's topology (see :mod:`emulator.diagnostics.topology`)."""

    kind: str
    message: str
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobResult:
    job_name: str
    status: str  # Completed | Failed | Stopped
    secondary_status: str
    failure_reason: str | None
    job_dir: Path
    hosts: tuple[HostOutcome, ...]
    description: dict[str, Any]
    model_artifact: Path | None = None
    output_artifact: Path | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    warnings: tuple[str, ...] = ()
    first_failure: str | None = None  # host that failed first
    real: bool = False  # True when the job ran on real SageMaker (pytest --real)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "Completed"

    @property
    def first_death(self) -> dict[str, Any] | None:
        """``Emulator.FirstDeath`` of ``job.json``: the first rank to die in a failed job (host, rank,
        signal or exception, stack; :mod:`emulator.diagnostics.firstdeath`); None when no rank died
        or the job ran on SageMaker (which reports no such thing)."""
        found = (self.description.get("Emulator") or {}).get("FirstDeath")
        return found if isinstance(found, dict) else None

    def log(self, host: str = "algo-1") -> str:
        for h in self.hosts:
            if h.name == host:
                return h.log.read_text(errors="replace") if h.log.exists() else ""
        raise KeyError(host)

    def log_tail(self, host: str, lines: int = 20) -> str:
        for h in self.hosts:
            if h.name == host:
                return tail(h.log, lines)
        raise KeyError(host)

    def model_files(self) -> dict[str, bytes]:
        """The members of ``model.tar.gz`` (name → bytes); empty when there is none."""
        return _members(self.model_artifact)

    def output_files(self) -> dict[str, bytes]:
        return _members(self.output_artifact)


def _members(path: Path | None) -> dict[str, bytes]:
    if path is None or not path.exists():
        return {}
    out = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                if f is not None:
                    out[m.name] = f.read()
    return out


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds")


def write_description(path: Path, description: dict[str, Any]) -> None:
    path.write_text(json.dumps(description, indent=2, default=str) + "\n")


def load(job_dir: Path) -> dict[str, Any]:
    """Read a finished job's ``job.json``."""
    data: dict[str, Any] = json.loads((job_dir / "job.json").read_text())
    return data
