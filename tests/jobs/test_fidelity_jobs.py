"""Fidelity, end to end: real hosts, the real toolkit, on the process backend (and the
docker backend where the item is about it).

Oracles are cited per test: AWS's documentation, the pinned toolkit's own texts, public
observations (public issues and forum threads, cited by URL), or plain facts (a shell's ``exit 137``).
"""

from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.job import request as rq
from emulator.job.result import JobResult
from emulator.supervisor import run

SECRETS = {"HF_TOKEN": "hf_do_not_leak", "WANDB_API_KEY": "wandb-do-not-leak", "GITHUB_TOKEN": "ghp_do_not_leak"}
PASSED = "SMEMU_FIDELITY_PASSED"
#: Skips locally, fails under ``CI=true`` (``require_mpi`` in conftest.py).
needs_mpi = pytest.mark.usefixtures("mpi_ready")
BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]


def _backend(name: str, request: pytest.FixtureRequest) -> str:
    if name == "docker":
        request.getfixturevalue("docker_ready")
    return name


def _source(root: Path, files: dict[str, str]) -> Path:
    src = root / "src"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def _output_files(result: JobResult) -> dict[str, bytes]:
    path = result.job_dir / "output" / "output.tar.gz"
    if not path.exists():
        return {}
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


# -- item 1: faults still pending after a spot restart fire in the new attempt ---------------------
FOREVER = """\
import json, os, pathlib, socket, time
ckpt = pathlib.Path(f"/opt/ml/checkpoints/state-{socket.gethostname()}.json")
step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
if step:
    print(f"resumed from step {step}", flush=True)
while True:  # never ends on its own; checkpoints every step
    time.sleep(0.3)
    step += 1
    ckpt.with_suffix(".tmp").write_text(json.dumps({"step": step}))
    os.replace(ckpt.with_suffix(".tmp"), ckpt)
    print(f"step {step}", flush=True)
"""


def test_spot_then_kill_ends_failed_with_exit_137(tmp_path: Path) -> None:
    """The issue's reproduction, made deterministic with log triggers: the spot interruption at
    step 3 restarts the hosts; the kill waits for the restarted hosts' "resumed" line, i.e. it can
    only fire in the second attempt. Before the fix it never fired and the job ran to MaxRuntime."""
    src = _source(tmp_path, {"forever.py": FOREVER})
    result = emulator.run(entry_point="forever.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                          job_name="spot-then-kill", checkpoint_dir=tmp_path / "ck", echo=False, stop_grace=1,
                          max_run=600, faults=["spot@log=/^step 3$/", "kill:algo-2:SIGKILL@log=/resumed from step/"])
    assert (result.status, result.secondary_status) == ("Failed", "Failed"), result.failure_reason
    host = {h.name: h for h in result.hosts}
    assert result.first_failure == "algo-2"
    assert host["algo-2"].exit_code == 137 and host["algo-2"].how == "signal SIGKILL"
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"
    emu = result.description["Emulator"]
    assert emu["SpotInterruptions"] == 1
    assert [f["Kind"] for f in emu["Faults"]] == ["spot", "kill"]
    assert "resumed from step" in result.log("algo-2")
    statuses = [t["Status"] for t in result.description["SecondaryStatusTransitions"]]
    assert statuses[:4] == ["Starting", "Downloading", "Training", "Interrupted"] and statuses[-1] == "Failed"


# -- item 2: nothing of the caller's environment reaches a rank, pip or the ssh-launched ranks -----
ENV_REPORT = """\
import json, os, socket
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "x")
with open(f"/opt/ml/model/rank-{socket.gethostname()}-{rank}.json", "w") as f:
    json.dump(dict(os.environ), f)
"""
#: An in-tree PEP 517 backend with no build requirements (no index needed): building it dumps the
#: environment pip runs the build in, inside a host to /opt/ml/output/data, outside next to itself.
ENVDUMP_BACKEND = """\
import base64, hashlib, json, os, socket, zipfile
from pathlib import Path


def _dump():
    out = Path("/opt/ml/output/data")
    where = out if out.is_dir() else Path(__file__).parent
    (where / f"pip-env-{socket.gethostname()}-{os.getpid()}.json").write_text(json.dumps(dict(os.environ)))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _dump()
    info = "smemu_envdump-1.0.dist-info"
    files = {f"{info}/METADATA": "Metadata-Version: 2.1\\nName: smemu-envdump\\nVersion: 1.0\\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = ""
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text)}\\n"
    record += f"{info}/RECORD,,\\n"
    name = "smemu_envdump-1.0-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w") as wheel:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            wheel.writestr(path, text)
    return name
"""
ENVDUMP_PYPROJECT = """\
[build-system]
requires = []
build-backend = "envdump_backend"
backend-path = ["."]

[project]
name = "smemu-envdump"
version = "1.0"
"""


def _leaks(env: dict[str, str]) -> list[str]:
    return [k for k, v in env.items() if k in SECRETS or v in SECRETS.values()]


@needs_mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_caller_secrets_reach_no_rank_no_pip_and_no_ssh_launched_rank(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_TOKEN, WANDB_API_KEY and GITHUB_TOKEN of the caller's environment reach nothing; the
    variable named with pass_env reaches every rank. On SageMaker a container has only the
    request's Environment and the platform's variables (CreateTrainingJob ``Environment``)."""
    from emulator.backends import jobenv

    backend = _backend(backend, request)
    monkeypatch.setattr(jobenv, "CACHE", tmp_path / "envs")  # a job environment of this test only
    for key, value in {**SECRETS, PASSED: "passed-on-purpose"}.items():
        monkeypatch.setenv(key, value)
    src = _source(tmp_path, {"report.py": ENV_REPORT, "requirements.txt": "./envdump\n",
                             "envdump/pyproject.toml": ENVDUMP_PYPROJECT,
                             "envdump/envdump_backend.py": ENVDUMP_BACKEND})
    result = emulator.run(entry_point="report.py", source_dir=src, instance_count=2, instance_type="ml.m5.large",
                          distribution={"mpi": {"enabled": True, "processes_per_host": 1}}, pass_env=[PASSED],
                          short_toolkit_sleeps=True, output_path=tmp_path / "out", job_name=f"secrets-{backend}",
                          backend=backend, echo=False, stop_grace=2)
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 40))
    ranks = {name: json.loads(data) for name, data in result.model_files().items() if name.startswith("rank-")}
    # rank 0 is started by mpirun on algo-1; rank 1 on algo-2 through ssh and orted
    assert sorted(ranks) == ["rank-algo-1-0.json", "rank-algo-2-1.json"]
    for name, env in ranks.items():
        assert _leaks(env) == [], name
        assert env[PASSED] == "passed-on-purpose", name
    inside = {name: json.loads(data) for name, data in _output_files(result).items() if name.startswith("pip-env-")}
    assert {n.split("-")[2] + "-" + n.split("-")[3] for n in inside} == {"algo-1", "algo-2"}  # the toolkit's pip
    outside = [json.loads(p.read_text()) for p in (src / "envdump").glob("pip-env-*.json")]
    if backend == "process":  # the job environment is prepared on this machine, before the hosts start
        assert outside, "the job environment's pip did not build the requirement"
    for env in [*inside.values(), *outside]:
        assert _leaks(env) == []


def test_pytest_fixture_takes_pass_env(sagemaker_job: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**SECRETS, PASSED: "from-the-fixture"}.items():
        monkeypatch.setenv(key, value)
    src = _source(tmp_path, {"report.py": ENV_REPORT})
    result = sagemaker_job(entry_point="report.py", source_dir=src, pass_env=[PASSED], stop_grace=2)
    assert result.status == "Completed", result.failure_reason
    [env] = [json.loads(data) for name, data in result.model_files().items() if name.startswith("rank-")]
    assert env[PASSED] == "from-the-fixture" and _leaks(env) == []


# -- item 10: an exit status is not a signal ---------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_137_is_an_exit_status_not_a_signal(backend: str, tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    """The container's own command exits 137 (as ``sys.exit(137)`` in it would): nothing killed
    it, so it is "exit 137" in the result and in job.json, with no signal. SageMaker sees only
    the status: ``AlgorithmError: Exit Code: 137``."""
    backend = _backend(backend, request)
    src = _source(tmp_path, {"unused.py": "\n"})
    job = rq.create(entry_point="unused.py", source_dir=src, output_path=tmp_path / "out",
                    job_name=f"exit-137-{backend}")
    job = dataclasses.replace(job, container_entrypoint=("/bin/sh", "-c", "echo exiting; exit 137"))
    result = run(job, backend=backend, echo=False, stop_grace=2)
    [host] = result.hosts
    assert (host.exit_code, host.signal, host.how) == (137, None, "exit 137")
    assert result.failure_reason == "AlgorithmError: Exit Code: 137"
    saved = json.loads((result.job_dir / "job.json").read_text())
    assert saved["Emulator"]["Hosts"][0]["ExitCode"] == 137 and saved["Emulator"]["Hosts"][0]["Signal"] is None
    assert saved["Emulator"]["FirstFailure"]["Signal"] is None
    # item 11: TrainingImage is the image that ran (none was requested); Emulator.Image says so too
    image = json.loads((result.job_dir / "launch-spec.json").read_text())["hosts"][0]["image"]
    if backend == "docker":
        assert image and saved["AlgorithmSpecification"]["TrainingImage"] == image == saved["Emulator"]["Image"]
    else:
        assert image is None and saved["Emulator"]["Image"] is None


# -- item 5 (and 11: GPU memory): algo-2 first ------------------------------------------------------
RANKS = """\
import json, os, socket
import torch
import torch.distributed as dist
dist.init_process_group("nccl")
free, total = torch.cuda.mem_get_info()
report = {"host": socket.gethostname(), "rank": dist.get_rank(), "master": os.environ["MASTER_ADDR"],
          "sm_hosts": os.environ["SM_HOSTS"], "free": free, "total": total,
          "total_memory": torch.cuda.get_device_properties(0).total_memory}
with open(f"/opt/ml/model/rank-{dist.get_rank()}.json", "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
"""
#: CUDA's total for an A100-SXM4-40GB (ml.p4d.24xlarge): deviceQuery "Total amount of global
#: memory: 40339 MBytes (42298834944 bytes)", driver 12.2 (bottlerocket-os/bottlerocket#3873).
A100_40GB = 42298834944


@pytest.fixture(scope="module")
def algo2_first(tmp_path_factory: pytest.TempPathFactory) -> JobResult:
    root = tmp_path_factory.mktemp("order")
    src = _source(root, {"ranks.py": RANKS})
    return emulator.run(entry_point="ranks.py", source_dir=src, instance_count=2, instance_type="ml.p4d.24xlarge",
                        gpus_per_host=1, distribution={"torch_distributed": {"enabled": True}},
                        host_order=["algo-2", "algo-1"], output_path=root / "out", job_name="algo-2-first",
                        echo=False, stop_grace=2)


def _reports(result: JobResult) -> list[dict[str, Any]]:
    return [json.loads(data) for name, data in sorted(result.model_files().items()) if name.startswith("rank-")]


def test_a_job_with_algo_2_first_makes_algo_2_rank_0(algo2_first: JobResult) -> None:
    """The toolkit's master is the distribution group's hosts[0] (``Environment.master_hostname``)
    and torchrun's node rank its index there: with ["algo-2", "algo-1"], rank 0 runs on algo-2."""
    assert algo2_first.status == "Completed", algo2_first.failure_reason
    reports = _reports(algo2_first)
    assert [(r["rank"], r["host"]) for r in reports] == [(0, "algo-2"), (1, "algo-1")]
    assert {r["master"] for r in reports} == {"algo-2"}
    assert {r["sm_hosts"] for r in reports} == {'["algo-1","algo-2"]'}  # sorted, as documented
    assert "--master_addr algo-2" in algo2_first.log("algo-1")


def test_gpu_memory_is_the_instance_types(algo2_first: JobResult) -> None:
    assert algo2_first.status == "Completed", algo2_first.failure_reason
    reports = _reports(algo2_first)
    assert len(reports) == 2, reports  # 2 hosts x 1 GPU
    for report in reports:  # memory not counted (the default, gpu_memory="off"): all of it free
        assert report["total_memory"] == report["total"] == report["free"] == A100_40GB


# -- item 6: ShardedByS3Key ------------------------------------------------------------------------
LIST_CHANNELS = """\
import json, os, socket
found = {}
for channel in ("train", "full"):
    root = os.environ["SM_CHANNEL_" + channel.upper()]
    found[channel] = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
with open(f"/opt/ml/output/data/{socket.gethostname()}.json", "w") as f:
    json.dump(found, f)
"""


def test_sharded_channel_of_five_files_on_two_hosts(tmp_path: Path) -> None:
    """"If there are n ML compute instances launched for a training job, each instance gets
    approximately 1/n of the number of S3 objects" (API_S3DataSource); FullyReplicated: all of them."""
    data = tmp_path / "data"
    names = ["a.csv", "b.csv", "c.csv", "d.csv", "nested/e.csv"]
    for name in names:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text(name)
    src = _source(tmp_path, {"list.py": LIST_CHANNELS})
    result = emulator.run(entry_point="list.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                          channels={"train": {"path": data, "distribution": "ShardedByS3Key"}, "full": data},
                          job_name="sharded", echo=False, stop_grace=2)
    assert result.status == "Completed", result.failure_reason
    seen = {name.removesuffix(".json"): json.loads(data) for name, data in _output_files(result).items()}
    one, two = seen["algo-1"]["train"], seen["algo-2"]["train"]
    assert not set(one) & set(two) and sorted(one + two) == names
    assert sorted([len(one), len(two)]) == [2, 3]
    assert seen["algo-1"]["full"] == seen["algo-2"]["full"] == names
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()) == names  # untouched


# -- item 7: a checkpoint path outside /opt/ml is restored and synced ---------------------------------
CHECKPOINT = """\
import argparse, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--ckpt")
path = os.path.join(parser.parse_args().ckpt, "state.json")
with open(path) as f:
    step = json.load(f)["step"]
print(f"resumed from step {step}", flush=True)
with open(path, "w") as f:
    json.dump({"step": step + 1}, f)
"""


@pytest.mark.parametrize("backend,local", [("process", "/tmp/sm-checkpoints"),
                                           pytest.param("docker", "/checkpoints", marks=pytest.mark.docker)])
def test_checkpoint_path_outside_opt_ml_is_restored_and_synced(backend: str, local: str, tmp_path: Path,
                                                               request: pytest.FixtureRequest) -> None:
    """"Existing checkpoints in S3 are written to the SageMaker container at the start of the job"
    and local files are uploaded to checkpoint_s3_uri (AWS, model-checkpoints.html), wherever
    checkpoint_local_path points."""
    backend = _backend(backend, request)
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "state.json").write_text('{"step": 5}')
    src = _source(tmp_path, {"ckpt.py": CHECKPOINT})
    result = emulator.run(entry_point="ckpt.py", source_dir=src, hyperparameters={"ckpt": local},
                          checkpoint_dir=ck, checkpoint_local_path=local, output_path=tmp_path / "out",
                          job_name=f"ckpt-{backend}", backend=backend, echo=False, stop_grace=2)
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 20))
    assert "resumed from step 5" in result.log("algo-1")
    assert json.loads((ck / "state.json").read_text()) == {"step": 6}
    if backend == "process":
        assert not Path(local).exists()  # the host's /tmp is its own


# -- item 3: smdistributed on a CPU instance runs as a CPU container would -----------------------------
CPU_SMDDP = """\
import json, shutil, socket, torch
try:
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
    smddp = "imported"
except ModuleNotFoundError as error:
    smddp = str(error)
report = {"smddp": smddp, "smddprun": shutil.which("smddprun"), "nvidia-smi": shutil.which("nvidia-smi"),
          "cuda": torch.cuda.is_available()}
with open(f"/opt/ml/model/{socket.gethostname()}.json", "w") as f:
    json.dump(report, f)
"""


@needs_mpi
def test_smdistributed_on_a_cpu_instance_does_not_run_smddp(tmp_path: Path) -> None:
    """No CPU instance has SMDDP ("Can the library be used with CPU nodes? No.", AWS SMDDP FAQ) and
    the CPU images do not ship it: the pinned toolkit prints its own "smddprun not being used"
    warning and runs mpirun without smddprun, and the script cannot import smdistributed."""
    src = _source(tmp_path, {"cpu.py": CPU_SMDDP})
    result = emulator.run(entry_point="cpu.py", source_dir=src, instance_type="ml.c5.xlarge",
                          distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
                          short_toolkit_sleeps=True, output_path=tmp_path / "out", job_name="cpu-smddp",
                          echo=False, stop_grace=2)
    assert result.status == "Completed", (result.failure_reason, result.log_tail("algo-1", 30))
    log = result.log("algo-1")
    assert "Warning: smddprun not being used as smddp is not installed" in log  # sagemaker_training 5.1.4
    mpirun = next(line for line in log.splitlines() if "mpirun --host" in line)
    assert "smddprun" not in mpirun and " -m mpi4py cpu.py" in mpirun
    report = json.loads(result.model_files()["algo-1.json"])
    assert report == {"smddp": "No module named 'smdistributed'", "smddprun": None, "nvidia-smi": None,
                      "cuda": False}
    assert any("ml.c5.xlarge has no SMDDP" in w for w in result.warnings)


# -- item 9: what the job's DLC lacks ----------------------------------------------------------------------
@pytest.mark.usefixtures("mpi_ready")
def test_an_mpi_job_on_a_dlc_without_mpi4py_fails_as_there(tmp_path: Path) -> None:
    """The toolkit starts every rank of an MPI-family job as ``python -m mpi4py``. The PyTorch 2.13 GPU
    DLC does not ship mpi4py (aws/deep-learning-containers docker/pytorch/2.13/cuda/pyproject.toml and
    Dockerfile.cuda, in emulator/job/dlc_images.json): warned before start, and the ranks fail at it,
    as on SageMaker. (The emulator's own Python needs no mpi4py: the job's comes from its DLC.)"""
    src = _source(tmp_path, {"train.py": "print('never')\n"})
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.xlarge",
                          framework_version="2.13", distribution={"mpi": {"enabled": True, "processes_per_host": 1}},
                          output_path=tmp_path / "out", job_name="no-mpi4py", echo=False, profile="ci")
    (warning,) = [w for w in result.warnings if "mpi4py" in w]
    assert "the PyTorch 2.13.0 GPU DLC does not ship mpi4py" in warning
    assert result.status == "Failed"
    assert "No module named mpi4py" in result.log("algo-1"), result.log("algo-1")[-3000:]
