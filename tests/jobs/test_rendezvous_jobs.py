"""Rendezvous checks and rejoined MPI output, end to end with real torch (gloo), real Open MPI and
real Lightning: the ranks' mistakes are named while they wait in ``init_process_group``, the job
stops as Failed with the diagnosis (or waits, as SageMaker, with ``wait_on_rendezvous_errors``),
and a correct 2 x 2 job gets no rendezvous diagnostic. Expected ranks and hosts come from the
job's layout (hosts x GPUs per host), never from the detector."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from emulator import supervisor
from emulator.diagnostics import rendezvous
from emulator.errors import RequestError
from emulator.job.request import create
from emulator.job.result import JobResult
from emulator.mpi_output import Rejoiner

from .moments import JumpWhenSet, SetWhen

SCRIPTS = Path(__file__).parents[1] / "scripts"
HOSTS, GPUS = 2, 2
HOST_NAMES = [f"algo-{i + 1}" for i in range(HOSTS)]
BASE: dict[str, Any] = dict(source_dir=SCRIPTS, instance_count=HOSTS, instance_type="ml.p4d.24xlarge",
                            gpus_per_host=GPUS, profile="ci")
TORCH_DIST = {"torch_distributed": {"enabled": True}}
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}
PYTORCHDDP = {"pytorchddp": {"enabled": True}}
#: Far beyond what any of these jobs needs: a job that ends, ends because of the diagnosis.
MAX_RUN = 600


def _mpi() -> None:
    if shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("MPI-family jobs need Open MPI's mpirun and mpi4py")


def run(tmp_path: Path, name: str, **kwargs: Any) -> tuple[JobResult, str]:
    stream = io.StringIO()
    options = {"max_run": MAX_RUN, **kwargs}
    request = create(output_path=tmp_path, job_name=name, **{**BASE, **options})
    return supervisor.run(request, stream=stream, stop_grace=2), stream.getvalue()


def rdzv(result: JobResult) -> dict[str, str]:
    """Kind → message of the job's rendezvous diagnostics, read from job.json."""
    found = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Diagnostics"]
    return {d["Kind"]: d["Message"] for d in found if d["Kind"].startswith("rendezvous-")}


def failed_with(result: JobResult, kind: str) -> str:
    description = json.loads((result.job_dir / "job.json").read_text())
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Failed", "Failed")
    message = rdzv(result)[kind]
    assert description["FailureReason"].startswith(rendezvous.REASON_PREFIX)
    assert message[:200] in description["FailureReason"]
    assert any(d.startswith("stopped on a rendezvous error") for d in description["Emulator"]["Deviations"])
    return message


def claimed_twice(message: str) -> dict[int, list[str]]:
    """rank → hosts named as requesting it, from ``rank R was requested by H (…) and H (…)``."""
    out = {}
    for rank, who in re.findall(r"rank (\d+) was requested by (.*?)(?=; rank \d+ was requested|: )", message):
        out[int(rank)] = re.findall(r"(algo-\d+) \(pid \d+", who)
    return out


# -- rendezvous: the duplicated-rank job -------------------------------------------------------
def test_local_rank_as_global_rank_is_named_and_fails_the_job(tmp_path: Path) -> None:
    result, console = run(tmp_path, "rdzv-local-rank", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                          hyperparameters={"mode": "local-rank"})
    message = failed_with(result, "rendezvous-duplicate-rank")
    # every local rank 0..GPUS-1 is asked for once per host
    assert claimed_twice(message) == {r: HOST_NAMES for r in range(GPUS)}
    assert "the script passes LOCAL_RANK as the global rank" in message
    assert re.findall(r"(?m)^\[emulator\] rendezvous error \(rendezvous-duplicate-rank\): ", console)
    # said beside the stacks at the stop, and the stacks show every rank in init_process_group
    stacks = result.description["Emulator"]["Stacks"]
    assert stacks["Reason"] == "diagnosis"
    assert sorted(r["Rank"] for r in stacks["Ranks"]) == list(range(HOSTS * GPUS))
    assert re.findall(r"(?m)^rendezvous at the stop .*\n    rendezvous-duplicate-rank \(algo-1, algo-2\)$", console)


def test_wait_on_rendezvous_errors_keeps_sagemakers_behaviour(tmp_path: Path) -> None:
    """The job waits until MaxRuntime by design. A fixed deadline raced the ranks under load (40 s
    was once too short in CI: no diagnosis yet at the stop), so the supervisor's clock reaches
    MaxRuntimeInSeconds the moment the console has said the complete diagnosis (every local rank
    asked for by both hosts), through its own deadline check (tests/jobs/moments.py)."""
    complete = {r: HOST_NAMES for r in range(GPUS)}

    def diagnosed(console: str) -> bool:
        said = re.findall(r"rendezvous error \(rendezvous-duplicate-rank\): (.*)", console)
        return bool(said) and claimed_twice(said[-1]) == complete

    said = threading.Event()
    stream = SetWhen(diagnosed, said)
    request = create(output_path=tmp_path, job_name="rdzv-wait", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                     hyperparameters={"mode": "local-rank"}, wait_on_rendezvous_errors=True,
                     **{**BASE, "max_run": MAX_RUN})
    result = supervisor.run(request, stream=stream, stop_grace=2, clock=JumpWhenSet(said, MAX_RUN))
    assert said.is_set(), stream.getvalue()[-3000:]  # reached through the diagnosis, not the real deadline
    assert (result.status, result.secondary_status) == ("Stopped", "MaxRuntimeExceeded")
    assert claimed_twice(rdzv(result)["rendezvous-duplicate-rank"]) == complete
    assert not any(d.startswith("stopped on a rendezvous error") for d in result.description["Emulator"]["Deviations"])


def test_world_size_from_one_hosts_gpu_count(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "rdzv-gpu-world", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                    hyperparameters={"mode": "gpu-world"})
    # torch itself refuses a rank outside the world at once (RuntimeError in init_process_group), often
    # before the check stops the job: then FailureReason is SageMaker's, and the diagnosis stands beside it.
    description = json.loads((result.job_dir / "job.json").read_text())
    assert (description["TrainingJobStatus"], description["SecondaryStatus"]) == ("Failed", "Failed")
    assert description["FailureReason"].startswith((rendezvous.REASON_PREFIX, "AlgorithmError: ExecuteUserScriptError"))
    message = rdzv(result)["rendezvous-world-size"]
    outside = list(range(GPUS, HOSTS * GPUS))  # the ranks past one host's GPU count
    found = re.search(r"^every process asks for world size (\d+), but ranks ([\d, -]+) \(([^)]*)\) are outside it",
                      message)
    assert found is not None, message
    named = {int(n) for part in found.group(2).split(", ")
             for n in (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))}
    assert (int(found.group(1)), named) == (GPUS, set(outside))
    assert found.group(3) == " and ".join(sorted({f"algo-{r // GPUS + 1}" for r in outside}))
    assert f"the launcher started a world of {HOSTS * GPUS}" in message
    assert "WORLD_SIZE looks taken from one host's GPU count" in message


def test_masters_that_differ(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "rdzv-master", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                    hyperparameters={"mode": "master"})
    message = failed_with(result, "rendezvous-master")
    for host in HOST_NAMES:  # each host's ranks meet at their own host
        assert re.search(rf"{host}:\d+ by {host} \(pid \d+, LOCAL_RANK \d+\) and {host} \(pid", message), message


def test_a_world_larger_than_the_launchers(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "rdzv-big-world", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                    hyperparameters={"mode": "big-world"})
    message = failed_with(result, "rendezvous-world-size")
    assert message.startswith(f"every process asks for world size {HOSTS * GPUS + 1}, but the launcher started "
                              f"a world of {HOSTS * GPUS}")


def test_a_rank_nobody_asks_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rendezvous, "MISSING_GRACE", 3.0)
    result, _ = run(tmp_path, "rdzv-missing", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                    hyperparameters={"mode": "skip-last"})
    message = failed_with(result, "rendezvous-missing-rank")
    world = HOSTS * GPUS
    assert message.startswith(f"rank {world - 1} of world size {world} never called init_process_group, "
                              f"while ranks 0-{world - 2} (algo-1 and algo-2) wait")


def test_a_slow_rank_is_not_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative example of the missing-rank check: the last rank joins well after the grace."""
    monkeypatch.setattr(rendezvous, "MISSING_GRACE", 2.0)
    result, _ = run(tmp_path, "rdzv-slow", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                    hyperparameters={"mode": "slow-last", "delay": 8})
    assert result.status == "Completed", result.failure_reason
    assert rdzv(result) == {}


def test_a_correct_job_gets_no_rendezvous_diagnostic(tmp_path: Path) -> None:
    """The negative example of every detector (duplicate, world size, master, missing rank)."""
    result, console = run(tmp_path, "rdzv-correct", entry_point="rdzv_modes.py", distribution=TORCH_DIST,
                          hyperparameters={"mode": "correct"})
    assert result.status == "Completed", result.failure_reason
    assert rdzv(result) == {}
    assert "rendezvous" not in console
    assert result.model_artifact is not None
    with tarfile.open(result.model_artifact) as tar:
        names = " ".join(tar.getnames())
    assert sorted(int(r) for r in re.findall(r"rank-(\d+)\.json", names)) == list(range(HOSTS * GPUS))


# -- Lightning under smdistributed (mpirun) --------------------------------------------------
def test_lightning_node_rank_unset_under_mpirun(tmp_path: Path) -> None:
    _mpi()
    pytest.importorskip("pytorch_lightning")
    result, _ = run(tmp_path, "rdzv-lightning", entry_point="rdzv_lightning.py", distribution=SMDDP,
                    source_dir=SCRIPTS.parent / "scripts_lightning")  # Lightning's own source dir
    message = failed_with(result, "rendezvous-duplicate-rank")
    assert claimed_twice(message) == {r: HOST_NAMES for r in range(GPUS)}
    assert "NODE_RANK is unset under mpirun" in message
    assert rendezvous.LIGHTNING_FIX in message


# -- rejoined MPI output ----------------------------------------------------------------------
def test_failing_pytorchddp_job_shows_whole_lines_and_contiguous_tracebacks(tmp_path: Path) -> None:
    _mpi()
    result, console = run(tmp_path, "rdzv-traceback", entry_point="mpi_traceback.py", distribution=PYTORCHDDP)
    assert result.status == "Failed"
    log = (result.job_dir / "logs" / "algo-1.log").read_text()
    raw = (result.job_dir / "logs" / "algo-1.raw.log").read_text()
    assert re.findall(r"\[1,mpirank:1,algo-1\]<stderr>:", raw)  # the exact stream is kept
    assert not re.findall(r"\]<std(?:out|err)>:", log)
    for text in (console, log):
        lines = text.splitlines()
        for rank in range(HOSTS * GPUS):
            host = f"algo-{rank // GPUS + 1}"  # mpirun --host algo-1:P,algo-2:P fills hosts in order
            prefix = f"[{host} rank {rank}] "
            assert re.findall(rf"(?m)^{re.escape(prefix)}rank {rank} says", text), (rank, text[-3000:])
            if rank % 2 == 0:
                continue
            start = next(i for i, line in enumerate(lines) if line == f"{prefix}Traceback (most recent call last):")
            end = next(i for i, line in enumerate(lines) if line == f"{prefix}RuntimeError: boom on rank {rank}")
            block = lines[start:end + 1]
            assert all(line.startswith(prefix) for line in block), block  # nothing in between
            assert [re.search(r"in (\S+)$", line).group(1) for line in block  # type: ignore[union-attr]
                    if "mpi_traceback.py" in line] == ["<module>", "middle", "inner"]


def test_rejoiner_joins_fragments_and_holds_tracebacks() -> None:
    r = Rejoiner("algo-1")
    raw = ["toolkit line",
           "[1,1]<stderr>:Trace[1,0]<stdout>:hel[1,1]<stderr>:back (most recent call last):",
           "[1,0]<stdout>:lo", "[1,0]<stdout>:", "[1,1]<stderr>:  File \"x.py\", line 1, in <module>",
           "[1,0]<stdout>:between", "[1,mpirank:1,algo-1]<stderr>:ValueError: x"]
    shown = [line for item in raw for line in r.feed(item, 0.0)] + r.flush(0.0, final=True)
    assert shown == ["toolkit line", "[algo-1 rank 0] hello", "[algo-1 rank 0] between",
                     "[algo-1 rank 1] Traceback (most recent call last):",
                     '[algo-1 rank 1]   File "x.py", line 1, in <module>', "[algo-1 rank 1] ValueError: x"]


def test_bad_wait_on_rendezvous_errors_names_the_field() -> None:
    with pytest.raises(RequestError, match=r"^wait_on_rendezvous_errors: must be true or false, got 'yes'"):
        create(entry_point="rdzv_modes.py", wait_on_rendezvous_errors="yes", **BASE)  # type: ignore[arg-type]
