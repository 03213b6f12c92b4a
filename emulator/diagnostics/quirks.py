"""Toolkit quirks that make SageMaker report success (or hide the cause) for a failed job.

The emulator runs the real ``sagemaker-training`` / ``sagemaker-pytorch-training`` launchers, so
these quirks happen here exactly as on SageMaker: the job ends ``Completed`` although ranks
failed. :func:`detect` reads the hosts' logs and the job's hyperparameters and returns warnings
the supervisor adds to the result, so the user learns that the green status is not to be trusted.

Sources (reference ``sagemaker-training-container.md``):

* §3.7 ``TorchDistributedRunner``: ``run(wait, capture_error)`` is called positionally; with
  ``sagemaker_toolkit_native_launcher_enabled`` truthy it becomes ``wait=False`` and
  ``process.create()`` never checks torchrun's return code: SUCCESS, exit 0.
* §3.2 step 6 (PTK ``training.py``): an ``ExecuteUserScriptError`` whose text contains
  ``terminate called after throwing an instance of 'gloo::EnforceNotMet'`` is logged as
  ``Known exception`` and swallowed: SUCCESS, exit 0.
* §3.5 ``mpi.WorkerRunner``: MPI/SMDDP worker hosts always exit 0; a failure reaches the job only
  through the master's mpirun exit code (and orted's ``orte_abort_on_non_zero_status``). SDK v3's
  MPI driver (``sm_drivers/distributed_drivers/mpi_driver.py``) does the same: workers wait for
  ``/tmp/done.algo-1`` and exit 0.

And one that makes SageMaker run a smaller job than asked (reference ``sagemaker-sdk-v3.md`` §3):

* SDK v3 3.27.0 ``mpi_driver.py`` passes ``num_processes=process_count`` (processes *per host*) to
  ``get_mpirun_command``, which becomes ``-np P`` next to ``--host algo-1:P,algo-2:P``: Open MPI
  starts P ranks and fills hosts in order, so they all run on algo-1 and the other hosts run none.
  Read from the command the driver logs (``Executing command: mpirun …``), so it fires only when the
  driver the job shipped has the bug (and not when ``mpi_additional_options`` adds a later
  ``-np``, which Open MPI takes).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..console import host_output
from ..observers import FinishContext, Observer, Report

GLOO_ENFORCE = "terminate called after throwing an instance of 'gloo::EnforceNotMet'"
#: Lines that show a rank failed, whatever launcher ran it.
_RANK_FAILURE = re.compile(
    r"Traceback \(most recent call last\)|^\S*\s*\w*(Error|Exception): |"
    r"ChildFailedError|exitcode\s*:\s*[1-9-]|terminate called after throwing|"
    r"Primary job\s+terminated normally, but \d+ process returned|"
    r"mpirun (noticed|detected) that",
    re.MULTILINE)
#: The toolkit's own log lines when it collects a launcher's return code and then reports.
_RECEIVED = re.compile(r"Received (-?\d+) from exiting process\.")
_SUCCESS = "Reporting training SUCCESS"
#: What SDK v3's drivers log: ``sm_train.sh`` echoes the driver, the driver its command line.
_V3_MPI_DRIVER = "Running MPI Driver"
_V3_MPIRUN = re.compile(r"^Executing command: (mpirun .*)$", re.MULTILINE)
_NP_OPTIONS = ("-np", "--np", "-n", "-c")
_HOST_OPTIONS = ("--host", "-host", "-H", "--H")
#: Open MPI options that change how ranks are placed on hosts (default: fill hosts in order).
_MAPPING_OPTIONS = ("--map-by", "-map-by", "--bynode", "-bynode", "--npernode", "-npernode", "--ppr",
                    "-ppr", "--rankfile", "-rf", "--hostfile", "-hostfile", "--machinefile")
_MPI_RANK_LINE = re.compile(r"^\[1,(?:mpirank:)?(\d+)(?:,[^\]]*)?\]<stderr>:.*(Error|Traceback)",
                            re.MULTILINE)


def _flag(hyperparameters: Mapping[str, Any], key: str) -> bool:
    value = hyperparameters.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value.strip().lower() in ("true", "1", "yes")
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _hosts_with(logs: Mapping[str, str], pattern: re.Pattern[str] | str) -> list[str]:
    out = []
    for host, text in sorted(logs.items(), key=lambda kv: _host_key(kv[0])):
        found = pattern in text if isinstance(pattern, str) else pattern.search(text) is not None
        if found:
            out.append(host)
    return out


def _host_key(host: str) -> tuple[int, str]:
    _, _, n = host.rpartition("-")
    return (int(n), host) if n.isdigit() else (1 << 30, host)


def detect(result_logs: Mapping[str, str], hyperparameters: Mapping[str, Any]) -> list[str]:
    """Warnings about launcher quirks that hide a failure; empty when none applies.

    ``result_logs`` maps host name to its whole log text; ``hyperparameters`` are the job's
    (JSON-encoded strings as the SDK sends them, or plain values).
    """
    warnings: list[str] = []
    native = _flag(hyperparameters, "sagemaker_toolkit_native_launcher_enabled")
    torch_dist = _flag(hyperparameters, "sagemaker_torch_distributed_enabled")
    mpi = _flag(hyperparameters, "sagemaker_mpi_enabled") or any(_V3_MPI_DRIVER in t for t in result_logs.values())
    smddp = (_flag(hyperparameters, "sagemaker_distributed_dataparallel_enabled")
             or _flag(hyperparameters, "sagemaker_pytorch_ddp_enabled"))

    if torch_dist and native and not mpi:
        failed = _hosts_with(result_logs, _RANK_FAILURE)
        where = (f"; rank failures are visible in the logs of {', '.join(failed)}" if failed
                 else "")
        warnings.append(
            "torch_distributed with sagemaker_toolkit_native_launcher_enabled: the toolkit starts "
            "torchrun without waiting for it (TorchDistributedRunner.run(wait, capture_error) is "
            "called positionally, so wait=False) and never checks its exit code, so SageMaker "
            f"reports Completed even when ranks fail{where}. Remove the flag to see real "
            "failures.")

    for host, text in sorted(result_logs.items(), key=lambda kv: _host_key(kv[0])):
        codes = [int(m.group(1)) for m in _RECEIVED.finditer(text)]
        bad = [c for c in codes if c != 0]
        if bad and _SUCCESS in text[text.rfind(f"Received {bad[-1]} from exiting process"):]:
            warnings.append(
                f"{host}: the toolkit received exit code {bad[-1]} from the launched process and "
                "still logged 'Reporting training SUCCESS'; the host exited 0, so SageMaker "
                "would report this job Completed although training failed.")

    gloo = _hosts_with(result_logs, GLOO_ENFORCE)
    if gloo:
        warnings.append(
            f"{', '.join(gloo)}: a rank died with gloo::EnforceNotMet (\"{GLOO_ENFORCE}\"). The "
            "PyTorch toolkit swallows this error as a 'Known exception' and the host exits 0, so "
            "SageMaker reports success for it; the training itself did not finish. Check the "
            "peer that dropped out of the collective (often a rank that crashed or was killed).")

    warnings += _v3_mpi_rank_count(result_logs)

    if mpi or smddp:
        runner = "MPI" if mpi else "SMDataParallel (mpirun)"
        workers = [h for h in result_logs if h != "algo-1"]
        failed_workers = [h for h in _hosts_with({h: result_logs[h] for h in workers},
                                                 _RANK_FAILURE)]
        ranks = sorted({int(m.group(1)) for text in result_logs.values()
                        for m in _MPI_RANK_LINE.finditer(text)})
        if failed_workers or ranks:
            detail = []
            if failed_workers:
                detail.append(f"errors in the logs of {', '.join(failed_workers)}")
            if ranks:
                detail.append(f"stderr errors from MPI rank(s) {', '.join(map(str, ranks))}")
            warnings.append(
                f"{runner} runner: worker hosts always exit 0 (mpi.WorkerRunner returns normally "
                "even when the MPI job failed); a rank's failure reaches the job only through "
                f"algo-1's mpirun exit code. Found {' and '.join(detail)}: if the job Completed, "
                "those ranks' failures were not counted.")
    return warnings


class QuirkObserver(Observer):
    """Adds :func:`detect`'s warnings, read from the hosts' logs once the job has ended."""

    def __init__(self, hyperparameters: Mapping[str, Any]) -> None:
        self.hyperparameters = hyperparameters

    def report(self, finish: FinishContext) -> Report:
        raw = {h.name: host_output(h.log) for h in finish.hosts}  # MPI tags intact
        logs = {name: path.read_text(errors="replace") if path.exists() else "" for name, path in raw.items()}
        return Report(warnings=detect(logs, self.hyperparameters))
def _mpirun_options(command: str) -> list[str] | None:
    """The options of a v3 driver's ``mpirun … <python> -m mpi4py <script> …`` (before the program)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    for i in range(1, len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] == "mpi4py":
            return argv[1:i - 1]
    return None


def _last_value(options: Sequence[str], names: Sequence[str]) -> str | None:
    value = None
    for i, token in enumerate(options[:-1]):
        if token in names:
            value = options[i + 1]
    return value


def _v3_mpi_rank_count(logs: Mapping[str, str]) -> list[str]:
    """SDK v3's MPI driver asking for fewer ranks than its ``--host`` list has slots."""
    out = []
    for host, text in sorted(logs.items(), key=lambda kv: _host_key(kv[0])):
        for match in _V3_MPIRUN.finditer(text):
            options = _mpirun_options(match.group(1))
            np_text = _last_value(options or [], _NP_OPTIONS)
            host_list = _last_value(options or [], _HOST_OPTIONS)
            if options is None or np_text is None or host_list is None or not np_text.isdigit():
                continue
            slots = []
            for entry in host_list.split(","):
                name, _, count = entry.partition(":")
                slots.append((name, int(count) if count.isdigit() else 1))
            ranks, total = int(np_text), sum(n for _, n in slots)
            if ranks >= total or len(slots) < 2:
                continue
            if any(o in _MAPPING_OPTIONS or o.startswith("--map-by=") for o in options):
                where = "placed as the extra mapping options say"
                idle_text = ""
            else:
                used, left = [], ranks
                for name, n in slots:
                    if left > 0:
                        used.append(name)
                    left -= n
                idle = [name for name, _ in slots if name not in used]
                where = f"all on {', '.join(used)}"
                idle_text = f"; {', '.join(idle)} ran no rank (idle)"
            out.append(
                f"{host}: SDK v3's MPI driver ran mpirun -np {ranks} --host {host_list}: only {ranks} of "
                f"{total} slots on {len(slots)} hosts got a rank, {where}{idle_text}. Its mpi_driver.py "
                "passes the processes per host as -np instead of hosts x processes; SageMaker runs the "
                "same command, so the real job trains on fewer ranks than the cluster has. Work-around: "
                f"MPI(mpi_additional_options=['-np', '{total}']) (Open MPI takes the last -np).")
    return out
