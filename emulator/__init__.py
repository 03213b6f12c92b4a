"""Local emulator of multi-host Amazon SageMaker training clusters.

``emulator.run(...)`` takes the keyword arguments of the SDK's ``PyTorch`` estimator and runs the
job on hosts ``algo-1..N`` on this machine, each with the real ``/opt/ml`` tree and the real
``sagemaker-training`` toolkit inside. Importing this package is cheap: no torch, no docker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .inhost.protocol import STOP_GRACE

if TYPE_CHECKING:
    from .job.result import JobResult

__all__ = ["run"]


def run(*, backend: str = "auto", stop_grace: float = STOP_GRACE, keep_hosts: bool = False,
        echo: bool = True, faults: Sequence[Any] = (), **estimator_kwargs: Any) -> JobResult:
    """Build a request from SDK-estimator keyword arguments and run it; see :mod:`emulator.job.request`.

    ``faults``: :mod:`emulator.diagnostics.faults` values or their CLI strings (``"kill:algo-2:SIGKILL@5s"``).
    """
    from .job.request import create
    from .supervisor import run as run_job

    return run_job(create(**estimator_kwargs), backend=backend, stop_grace=stop_grace,
                   keep_hosts=keep_hosts, echo=echo, faults=faults)
