"""The host protocol: every name, path and convention shared by the emulator and its in-host code.

One module, two import names: inside hosts it is ``_sm_emulator_protocol`` (this folder is on each
host's ``PYTHONPATH``); outside it is ``emulator.inhost.protocol``. Standard library only, no
side effects, so both sides can import it anywhere. Add a name here rather than writing its
literal in a second place.

Contents: the ``EMULATOR_*`` variables the emulator sets in hosts, the in-host paths it mounts or
reads, the defaults SageMaker uses (region, stop grace) and the job network, the exit-status
convention, and small ``/proc`` readers.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass

# -- variables the emulator sets in every host, and the files ranks write -----------------------
# Defined in ``_sm_emulator_names`` (no imports: start-up code reads them from there).
# One module under two names: ``emulator.inhost.site._sm_emulator_names`` on the emulator's side,
# the top-level ``_sm_emulator_names`` inside hosts.
_names = importlib.import_module("._sm_emulator_names", __package__) if __package__ else \
    importlib.import_module("_sm_emulator_names")
COLLECTIVES_PREFIX: str = _names.COLLECTIVES_PREFIX
ENDED_PREFIX: str = _names.ENDED_PREFIX
ENV_COLLECTIVES: str = _names.ENV_COLLECTIVES
ENV_DIAG_DIR: str = _names.ENV_DIAG_DIR
ENV_DLC: str = _names.ENV_DLC
ENV_DLC_GAPS: str = _names.ENV_DLC_GAPS
ENV_DLC_TORCH: str = _names.ENV_DLC_TORCH
ENV_FAST_START: str = _names.ENV_FAST_START
ENV_FAST_START_PRELOAD: str = _names.ENV_FAST_START_PRELOAD
ENV_GPU_COUNT: str = _names.ENV_GPU_COUNT
ENV_GPU_MEMORY: str = _names.ENV_GPU_MEMORY
ENV_GPU_MEMORY_MODE: str = _names.ENV_GPU_MEMORY_MODE
ENV_GPU_MODEL: str = _names.ENV_GPU_MODEL
ENV_INHOST: str = _names.ENV_INHOST
ENV_PREFIX: str = _names.ENV_PREFIX
ENV_SHORT_TOOLKIT_SLEEPS: str = _names.ENV_SHORT_TOOLKIT_SLEEPS
ENV_SMDDP_STRICT: str = _names.ENV_SMDDP_STRICT
ENV_TOOLKIT_SKIPS_TORCH_IMPORT: str = _names.ENV_TOOLKIT_SKIPS_TORCH_IMPORT
EXIT_PREFIX: str = _names.EXIT_PREFIX
FATAL_PREFIX: str = _names.FATAL_PREFIX
RDZV_PREFIX: str = _names.RDZV_PREFIX
STACKS_PREFIX: str = _names.STACKS_PREFIX
STACKS_SIGNAL: int = _names.STACKS_SIGNAL

#: Every ``EMULATOR_*`` name above; the plan never copies a caller's value of one into a host.
EMULATOR_VARIABLES = (ENV_INHOST, ENV_GPU_COUNT, ENV_GPU_MODEL, ENV_GPU_MEMORY, ENV_GPU_MEMORY_MODE, ENV_DIAG_DIR,
                      ENV_SHORT_TOOLKIT_SLEEPS, ENV_FAST_START, ENV_FAST_START_PRELOAD, ENV_SMDDP_STRICT,
                      ENV_COLLECTIVES, ENV_TOOLKIT_SKIPS_TORCH_IMPORT, ENV_DLC, ENV_DLC_GAPS, ENV_DLC_TORCH)

# -- in-host paths ------------------------------------------------------------------------------
#: Where the in-host folder (the folders below) is mounted in docker containers.
DOCKER_INHOST_ROOT = "/opt/sm-emulator/inhost"
#: The in-host folders, relative to the in-host root. ``site`` is on every host's ``PYTHONPATH``;
#: the others only where the instance type has what they stand for (the plan chooses them):
#: ``gpu/bin`` (``nvidia-smi``) on GPU instance types; ``smddp/bin`` (``smddprun``) and
#: ``smddp/site`` (the ``smdistributed`` package) where the image ships SMDDP (GPU DLCs).
INHOST_SITE = "site"
INHOST_GPU_BIN = "gpu/bin"
INHOST_SMDDP_BIN = "smddp/bin"
INHOST_SMDDP_SITE = "smddp/site"
#: Where ranks write diagnostics records (value of ``EMULATOR_DIAG_DIR`` in every host).
DIAG_DIR = "/tmp/.sm-emulator-diagnostics"
#: Where the SageMaker toolkit starts ``sshd`` (by absolute path); in hosts that cannot run
#: OpenSSH's, the process backend mounts the stand-in (``site/_sm_emulator_sshd.py``) here.
SSHD = "/usr/sbin/sshd"
#: The per-job ssh folder mounted in every host, its ``sshd_config`` and the port sshd listens on.
SSH_DIR = "/etc/ssh"
SSHD_CONFIG = f"{SSH_DIR}/sshd_config"
SSH_PORT = 22
#: Empty markers (``once-<key>``, no suffix) in ``EMULATOR_DIAG_DIR`` by which a message is printed once
#: per job, not once per process (``_sm_emulator_patches.first_in_job``).
ONCE_PREFIX = "once-"
#: The collective ring ``coll-<host>-<pid>.bin`` (little endian, MAP_SHARED, so it survives a
#: SIGKILL): a header, then ``COLL_CAPACITY`` fixed-size records written round robin.
#: Header: magic, version, record size, capacity, records written so far (u64), owner pid.
COLL_MAGIC = b"SMEC"
COLL_HEADER = "<4sIIIQI36x"  # 64 bytes
#: Record: per-group sequence number (1-based), group index and op index (into the side file's
#: ``groups``/``ops``), state (COLL_ISSUED/RETURNED/RAISED), crc32 of the full signature, time
#: issued and time returned (``time.time()``), signature text and call site (both truncated).
COLL_RECORD = "<IHBBI4xdd48s48s"  # 128 bytes
COLL_CAPACITY = 2048
COLL_ISSUED, COLL_RETURNED, COLL_RAISED = 1, 2, 3
#: SageMaker's container paths.
OPT_ML = "/opt/ml"
CODE_DIR = "/opt/ml/code"
CHECKPOINT_DIR = "/opt/ml/checkpoints"

#: The variables a rank's global and local rank are in: torchrun's, then Open MPI's (what
#: ``mpirun`` sets; https://docs.open-mpi.org/en/main/tuning-apps/environment-var.html).
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")

#: A job's scratch tree on the machine running the emulator is ``<temp>/<SCRATCH_PREFIX><job>-<id>``
#: (the supervisor creates it; ``kept`` and ``reap`` find them by this prefix).
SCRATCH_PREFIX = "sm-emulator-"


def scratch_prefix(job_name: str) -> str:
    """The name prefix of ``job_name``'s scratch tree (``tempfile.mkdtemp(prefix=...)``)."""
    return f"{SCRATCH_PREFIX}{job_name[:20]}-"

# -- SageMaker defaults and the job network -----------------------------------------------------
#: The region a job reports when none is given (the SDK's examples' default).
DEFAULT_REGION = "us-west-2"
#: The account id every emulated ARN carries (moto's default account, so the SDK session and the
#: hosts' ``TRAINING_JOB_ARN`` agree).
ACCOUNT_ID = "123456789012"
#: Seconds between SIGTERM and SIGKILL when SageMaker stops a job (StopTrainingJob, MaxRuntime).
STOP_GRACE = 120.0
#: Each job's private network; host N (1-based) gets the (N+1)-th address (algo-1: 10.0.0.2).
JOB_SUBNET = "10.0.0.0/24"
#: The interface every host sees (resourceconfig.json's ``network_interface_name``).
INTERFACE = "eth0"


# -- exit statuses ------------------------------------------------------------------------------
def status_of_signal(sig: int) -> int:
    """A container's exit status when its PID 1 died of signal ``sig`` (docker's 128+N)."""
    return 128 + sig


@dataclass(frozen=True)
class HostExit:
    """How a host's PID 1 ended: its exit ``status`` (0-255, as ``docker wait`` reports it) and,
    when the emulator itself delivered a fatal signal to the host, that ``signal``.

    A script that calls ``sys.exit(137)`` has status 137 and no signal; a host the emulator (or a
    ``kill`` fault) SIGKILLed has status 137 and signal 9. SageMaker sees only the status.
    """

    status: int
    signal: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == 0

    def describe(self) -> str:
        if self.signal is not None:
            import signal as _signal

            try:
                return f"signal {_signal.Signals(self.signal).name}"
            except ValueError:
                return f"signal {self.signal}"
        return f"exit {self.status}"


def exit_of(status: int, sent: set[int] | frozenset[int] = frozenset()) -> HostExit:
    """Interpret a container exit ``status``: 128+N is "killed by signal N" only when the emulator
    sent signal N to that host (``sent``); otherwise it is the program's own exit status."""
    sig = status - 128
    if 0 < sig < 65 and sig in sent:
        return HostExit(status, sig)
    return HostExit(status)


# -- /proc readers (Linux) ----------------------------------------------------------------------
@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the emulator uses."""

    pid: int
    state: str
    ppid: int
    start_time: int  # clock ticks since boot: tells a reused pid apart


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or None when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return ProcStat(pid, rest[0], int(rest[1]), int(rest[19]))
    except (OSError, ValueError, IndexError):
        return None


def proc_environ(pid: int) -> dict[str, str]:
    """The environment of process ``pid`` ({} when it is gone or not readable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def proc_cmdline(pid: int) -> list[str]:
    """The argv of process ``pid`` ([] when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
    except OSError:
        return []


def proc_nspids(pid: int) -> list[int]:
    """``NSpid`` of ``/proc/<pid>/status``: the pid in each PID namespace, outermost first."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def proc_caught_signals(pid: int) -> int:
    """``SigCgt`` of ``/proc/<pid>/status`` (bit N-1 set: the process handles signal N); 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """True when ``pid`` exists (and, if ``start_time`` is given, is still the same process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start_time is None:
        return True
    stat = proc_stat(pid)
    return stat is None or stat.start_time == start_time
