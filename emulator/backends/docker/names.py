"""What the docker backend names on the engine: the default image, the labels that tie containers
and networks to a job, a host and an emulator process, and the job's network and container names.

Labels are how ``python -m emulator reap`` finds what a killed emulator left; the owner labels
(``owner-pid``/``owner-start``/``owner-host``) say whether that emulator is still alive.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ...inhost import protocol as P

#: The emulator's own image (``nox -s image``), run when a job names no image the engine has.
DEFAULT_IMAGE = "sagemaker-emulator:latest"
#: The script that builds the images in a source checkout; a wheel carries a copy (:mod:`.context`).
BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "docker" / "build.py"
LABEL = "sagemaker-emulator"
LABEL_JOB = f"{LABEL}.job"
LABEL_HOST = f"{LABEL}.host"
LABEL_OWNER_PID = f"{LABEL}.owner-pid"
LABEL_OWNER_START = f"{LABEL}.owner-start"
LABEL_OWNER_HOST = f"{LABEL}.owner-host"
LABEL_HELPER = f"{LABEL}.helper"
#: The job's backend scratch folder: ``reap JOB_DIR`` finds the containers of a run killed before it
#: wrote the kept record (:func:`~.reaper.reap_scratch`).
LABEL_SCRATCH = f"{LABEL}.scratch"


def owner_labels() -> dict[str, str]:
    """Labels that tie a container or network to this process (see :func:`~.reaper.reap_jobs`)."""
    pid = os.getpid()
    stat = P.proc_stat(pid)
    return {LABEL_OWNER_PID: str(pid), LABEL_OWNER_START: str(stat.start_time) if stat else "",
            LABEL_OWNER_HOST: socket.gethostname()}


def job_labels(scratch: Path) -> dict[str, str]:
    """The labels every container and the network of a job get besides their own: the job's scratch
    folder (``reap JOB_DIR`` finds a killed run's containers by it) and this emulator process
    (:func:`~.reaper.reap_jobs` finds those whose emulator is gone)."""
    return {LABEL_SCRATCH: str(scratch), **owner_labels()}


def network_name(job_id: str) -> str:
    return f"sm-emulator-{job_id}"


def container_name(job_id: str, host: str) -> str:
    return f"sm-emulator-{job_id}-{host}"
