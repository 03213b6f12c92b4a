"""Fidelity, the parts that need no running host: plans, preflight checks, shares.

Oracles: AWS's documentation (cited per test), the real ``sagemaker-training`` toolkit run on the
planned files, and values written out by hand — never the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator import preflight
from emulator.backends.base import Runtime, World
from emulator.errors import RequestError
from emulator.inhost import GPU_BIN, ROOT
from emulator.job import deviations, sharding
from emulator.job import plan as planning
from emulator.job import request as rq

from ..fakes import FakeBackend, FakeClock, HostScript
from .test_bad_input import workspace  # noqa: F401  (a fixture)

TORCHRUN = {"torch_distributed": {"enabled": True}}
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}
MPI = {"mpi": {"enabled": True, "processes_per_host": 1}}


@pytest.fixture
def src(workspace: Path) -> Path:  # noqa: F811
    return workspace / "src"  # holds train.py


def _plan(src: Path, **kwargs: Any) -> planning.JobPlan:
    kwargs.setdefault("output_path", src.parent / "out")
    kwargs.setdefault("job_name", "fidelity-plan")
    req = rq.create(entry_point="train.py", source_dir=src, **kwargs)
    runtime = Runtime(python=sys.executable, train_command=("train",), inhost_root=str(ROOT),
                      base_env={"HOME": "/root"}, path="/usr/bin:/bin")
    return planning.build(req, runtime=runtime, caller_env={}, num_cpus=2)


def _rc(host: planning.HostPlan) -> dict[str, Any]:
    rc: dict[str, Any] = json.loads(host.files["input/config/resourceconfig.json"])
    return rc


def _real_toolkit(host: planning.HostPlan, tmp: Path) -> dict[str, Any]:
    """What the pinned sagemaker-training toolkit derives from ``host``'s planned files."""
    base = tmp / host.name / "opt" / "ml"
    for rel, text in host.files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base), "PATH": f"{GPU_BIN}:{os.environ['PATH']}",
           "EMULATOR_GPU_COUNT": str(host.gpus), "SAGEMAKER_TRAINING_MODULE": host.env["SAGEMAKER_TRAINING_MODULE"]}
    code = ("import json; from sagemaker_training import environment as e; env = e.Environment(); "
            "v = env.to_env_vars(); print(json.dumps({'hosts': env.hosts, 'master': env.master_hostname, "
            "'distribution_hosts': env.distribution_hosts, 'is_master': env.is_master, "
            "'SM_HOSTS': v['SM_HOSTS']}))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- item 5: host order ---------------------------------------------------------------------------
# AWS: "hosts: The list of names of all containers on the container network, sorted
# lexicographically" (resourceconfig.json, "How Amazon SageMaker Provides Training Information";
# the toolkit's Environment.hosts docstring says the same).
TWELVE_SORTED = ["algo-1", "algo-10", "algo-11", "algo-12", "algo-2", "algo-3", "algo-4", "algo-5", "algo-6",
                 "algo-7", "algo-8", "algo-9"]


def test_twelve_hosts_are_listed_lexicographically(src: Path, tmp_path: Path) -> None:
    job = _plan(src, instance_count=12, instance_type="ml.p4d.24xlarge", gpus_per_host=1, distribution=TORCHRUN)
    assert [h.name for h in job.hosts] == [f"algo-{i}" for i in range(1, 13)]  # started as algo-1..12
    for host in job.hosts:
        rc = _rc(host)
        assert rc["hosts"] == TWELVE_SORTED
        assert rc["instance_groups"][0]["hosts"] == TWELVE_SORTED
    algo10 = job.host("algo-10")
    real = _real_toolkit(algo10, tmp_path)
    assert real["SM_HOSTS"] == json.dumps(TWELVE_SORTED, separators=(",", ":"))
    assert real["master"] == "algo-1" and real["distribution_hosts"] == TWELVE_SORTED
    # the predicted torchrun follows the real toolkit's order (its TorchDistributedRunner passes
    # --node_rank distribution_hosts.index(current_host)): algo-10 is node 1, algo-2 node 4
    assert algo10.launcher is not None and algo10.launcher[algo10.launcher.index("--node_rank") + 1] == "1"
    algo2 = job.host("algo-2").launcher
    assert algo2 is not None and algo2[algo2.index("--node_rank") + 1] == "4"


def test_host_order_puts_algo_2_first(src: Path, tmp_path: Path) -> None:
    """A real ml.p4d.24xlarge job listed its group as ["algo-2", "algo-1"] (reference
    sagemaker-sdk-local-mode.md §1.4): with that order the toolkit makes algo-2 the master."""
    job = _plan(src, instance_count=2, instance_type="ml.p4d.24xlarge", gpus_per_host=1, distribution=TORCHRUN,
                host_order=["algo-2", "algo-1"])
    rc = _rc(job.host("algo-1"))
    assert rc["instance_groups"][0]["hosts"] == ["algo-2", "algo-1"]
    assert rc["hosts"] == ["algo-1", "algo-2"]
    real = _real_toolkit(job.host("algo-1"), tmp_path)
    assert real["master"] == "algo-2" and real["distribution_hosts"] == ["algo-2", "algo-1"]
    assert real["is_master"] is False
    launcher = job.host("algo-1").launcher
    assert launcher is not None
    assert launcher[launcher.index("--master_addr") + 1] == "algo-2"
    assert launcher[launcher.index("--node_rank") + 1] == "1"


def test_host_order_moves_the_mpi_launch_to_algo_2(src: Path, tmp_path: Path) -> None:
    job = _plan(src, instance_count=2, instance_type="ml.m5.xlarge", distribution=MPI,
                host_order=["algo-2", "algo-1"])
    assert job.host("algo-1").launcher is None  # a worker: it waits for orted
    mpirun = job.host("algo-2").launcher
    assert mpirun is not None and mpirun[mpirun.index("--host") + 1] == "algo-2,algo-1"
    assert _real_toolkit(job.host("algo-2"), tmp_path)["is_master"] is True


# -- item 3: SMDDP and nvidia-smi only where the instance type has them ---------------------------
def _finds(host: planning.HostPlan) -> dict[str, Any]:
    env = {"PATH": host.env["PATH"], "PYTHONPATH": host.env["PYTHONPATH"]}
    code = "import importlib.util as u, json; print(json.dumps(u.find_spec('smdistributed') is not None))"
    module = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return {"smddprun": shutil.which("smddprun", path=host.env["PATH"]),
            "nvidia-smi": shutil.which("nvidia-smi", path=host.env["PATH"]),
            "smdistributed": json.loads(module.stdout)}


def test_cpu_instance_has_no_smddp_and_no_nvidia_smi(src: Path) -> None:
    """AWS's SMDDP FAQ: "Can the library be used with CPU nodes? No."; the CPU DLCs ship neither
    smdistributed nor smddprun, so the toolkit takes its "smddprun not being used" path."""
    cpu = _plan(src, instance_count=2, instance_type="ml.c5.xlarge", distribution=SMDDP).host("algo-1")
    assert _finds(cpu) == {"smddprun": None, "nvidia-smi": None, "smdistributed": False}
    assert cpu.launcher is not None and "smddprun" not in cpu.launcher
    assert cpu.launcher[cpu.launcher.index("-m") - 1:cpu.launcher.index("-m") + 2] == [sys.executable, "-m",
                                                                                       "mpi4py"]
    gpu = _plan(src, instance_count=2, instance_type="ml.p4d.24xlarge", gpus_per_host=1,
                distribution=SMDDP, job_name="fidelity-gpu").host("algo-1")
    found = _finds(gpu)
    assert found["smddprun"] and found["nvidia-smi"] and found["smdistributed"] is True
    assert gpu.launcher is not None and "smddprun" in gpu.launcher


def test_smddp_on_an_undocumented_gpu_type_is_a_warning(src: Path) -> None:
    from emulator.diagnostics.smddp_report import type_warnings

    req = rq.create(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.12xlarge",
                    distribution=SMDDP, output_path=src.parent / "out", job_name="g5-smddp")
    # AWS: "Instance types supported by the SageMaker AI data parallel library: ml.p4d.24xlarge,
    # ml.p4de.24xlarge" (distributed-data-parallel-support.html)
    [warning] = type_warnings(req)
    assert "ml.g5.12xlarge" in warning and "ml.p4d.24xlarge, ml.p4de.24xlarge" in warning
    p4d = rq.create(entry_point="train.py", source_dir=src, instance_type="ml.p4d.24xlarge", distribution=SMDDP,
                    output_path=src.parent / "out", job_name="p4d-smddp")
    assert type_warnings(p4d) == []


def test_smddp_strict_reaches_the_hosts(src: Path) -> None:
    job = _plan(src, instance_type="ml.p4d.24xlarge", distribution=SMDDP, smddp_strict=True)
    assert job.hosts[0].env["EMULATOR_SMDDP_STRICT"] == "1"
    assert "EMULATOR_SMDDP_STRICT" not in _plan(src, instance_type="ml.p4d.24xlarge", distribution=SMDDP,
                                                job_name="not-strict").hosts[0].env


# -- item 11: GPU scale-down is a deviation ------------------------------------------------------
def test_gpu_scale_down_is_listed_in_deviations(src: Path) -> None:
    req = rq.create(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.p4d.24xlarge",
                    gpus_per_host=2, output_path=src.parent / "out", job_name="scaled")
    backend = FakeBackend(FakeClock(), [{"algo-1": HostScript(0.1), "algo-2": HostScript(0.1)}])
    from emulator.supervisor import run

    result = run(req, backend=backend, echo=False, clock=backend.clock, observers=[])
    saved = json.loads((req.job_dir / "job.json").read_text())
    assert saved == result.description
    [line] = [d for d in saved["Emulator"]["Deviations"] if "GPUs" in d]
    assert "2 of 8 GPUs per host on ml.p4d.24xlarge" in line  # p4d.24xlarge has 8 A100s
    full = rq.create(entry_point="train.py", source_dir=src, instance_type="ml.p4d.24xlarge", gpus_per_host=8,
                     output_path=src.parent / "out", job_name="full")
    assert not any("GPUs" in d for d in deviations.for_request(full))


# -- item 6: ShardedByS3Key -----------------------------------------------------------------------
def test_sharded_channel_gives_each_host_a_disjoint_share(tmp_path: Path) -> None:
    """AWS: "If there are n ML compute instances launched for a training job, each instance gets
    approximately 1/n of the number of S3 objects" (API_S3DataSource, S3DataDistributionType)."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    names = ["a.csv", "b.csv", "c.csv", "d.csv", "sub/e.csv"]
    for name in names:
        (data / name).write_text(name)
    shares = [sharding.share(data, ["algo-1", "algo-2"], h) for h in ("algo-1", "algo-2")]
    assert sorted(shares[0] + shares[1]) == sorted(names)
    assert not set(shares[0]) & set(shares[1])
    assert sorted(len(s) for s in shares) == [2, 3]
    # more hosts than objects: "some nodes won't get any data"
    many = [sharding.share(data, [f"algo-{i}" for i in range(1, 8)], f"algo-{i}") for i in range(1, 8)]
    assert sum(len(s) for s in many) == 5 and [len(s) for s in many].count(0) == 2


def test_sharded_channel_is_planned_per_host(src: Path, tmp_path: Path) -> None:
    from emulator.backends.materialise import host_mounts

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("1\n")
    job = _plan(src, instance_count=2, channels={"train": {"path": data, "distribution": "ShardedByS3Key"},
                                                 "full": data})
    config = json.loads(job.hosts[0].files["input/config/inputdataconfig.json"])
    assert config["train"]["S3DistributionType"] == "ShardedByS3Key"
    assert config["full"]["S3DistributionType"] == "FullyReplicated"
    sources = {h.name: {m.target: m.source for m in host_mounts(job, h.name)} for h in job.hosts}
    train = "/opt/ml/input/data/train"
    assert sources["algo-1"][train] != sources["algo-2"][train] != data
    assert sources["algo-1"]["/opt/ml/input/data/full"] == sources["algo-2"]["/opt/ml/input/data/full"] == data


def test_single_object_s3_channel_is_a_copy(tmp_path: Path) -> None:
    """A channel whose S3 prefix names one object holds that file: a real file, not a symlink to a
    path only this machine has (which a container cannot follow)."""
    from emulator.sdk.translate import _channel

    obj = tmp_path / "bucket" / "data" / "one.csv"
    obj.parent.mkdir(parents=True)
    obj.write_text("1,2\n")
    temp: list[Path] = []
    try:
        channel = _channel({"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3Uri": obj.as_uri(), "S3DataType": "S3Prefix", "S3DataDistributionType": "FullyReplicated"}}},
            None, temp)
        copied = channel.path / "one.csv"
        assert copied.is_file() and not copied.is_symlink() and copied.read_text() == "1,2\n"
    finally:
        for folder in temp:
            shutil.rmtree(folder)


# -- item 7: checkpoint paths outside /opt/ml ------------------------------------------------------
def test_checkpoint_path_outside_opt_ml_is_mounted(src: Path, tmp_path: Path) -> None:
    from emulator.backends.materialise import host_mounts

    job = _plan(src, instance_count=2, checkpoint_dir=tmp_path / "ck", checkpoint_local_path="/tmp/ckpt")
    for host in job.hosts:
        mounts = {m.target: m for m in host_mounts(job, host.name)}
        assert "/tmp/ckpt" in mounts and not mounts["/tmp/ckpt"].read_only
        assert json.loads(host.files["input/config/checkpointconfig.json"])["LocalPath"] == "/tmp/ckpt"
    assert mounts["/tmp/ckpt"].source.name == "algo-2.checkpoints"


@pytest.mark.parametrize("path,backend,ok", [
    ("/tmp/ckpt", "process", True), ("/opt/ml/checkpoints", "process", True), ("/checkpoints", "docker", True),
    ("/checkpoints-that-do-not-exist", "process", False), ("/usr", "docker", False), ("/", "process", False),
    ("/opt", "docker", False), ("/proc/self", "docker", False)])
def test_checkpoint_path_is_checked_per_backend(src: Path, tmp_path: Path, path: str, backend: str,
                                                ok: bool) -> None:
    req = rq.create(entry_point="train.py", source_dir=src, checkpoint_dir=tmp_path / "ck",
                    checkpoint_local_path=path, output_path=tmp_path / "out", job_name="ck")
    from emulator.backends import get_backend

    if ok:
        preflight.checkpoint_path(req, get_backend(backend))
    else:
        with pytest.raises(RequestError) as info:
            preflight.checkpoint_path(req, get_backend(backend))
        assert info.value.field == "CheckpointConfig.LocalPath"


def test_checkpoint_path_without_a_checkpoint_dir_is_refused(src: Path, tmp_path: Path) -> None:
    """The SDK sends CheckpointConfig only with checkpoint_s3_uri (``Session._get_train_request``:
    ``if checkpoint_s3_uri: ... LocalPath``), so a local path alone would be silently dropped."""
    with pytest.raises(RequestError) as info:
        rq.create(entry_point="train.py", source_dir=src, checkpoint_local_path="/opt/ml/ck",
                  output_path=tmp_path / "out", job_name="ck")
    assert info.value.field == "CheckpointConfig.LocalPath" and "checkpoint_dir" in str(info.value)


# -- item 9: what the job's Python lacks -----------------------------------------------------------
def test_imports_are_read_without_running_anything(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import os\nimport pytorch_lightning as pl\nfrom lightning_fabric import Fabric\n"
        "raise SystemExit('never run')\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("from lightning.pytorch import Trainer\n")
    (tmp_path / "optional.py").write_text(
        "try:\n    import deepspeed\nexcept ImportError:\n    deepspeed = None\n")
    (tmp_path / "broken.py").write_text("def (:\n")
    assert {"os", "pytorch_lightning", "lightning_fabric", "lightning"} <= preflight.imported_modules(tmp_path)
    assert "deepspeed" not in preflight.imported_modules(tmp_path)  # guarded: optional


def test_mpi_family_on_an_image_without_mpi4py_is_named(src: Path) -> None:
    """The toolkit starts every rank of an MPI-family job as ``python -m mpi4py``. The PyTorch 2.13
    GPU DLC does not ship mpi4py (aws/deep-learning-containers docker/pytorch/2.13/cuda/pyproject.toml
    and Dockerfile.cuda; its CPU image does): warned before start, not when requirements.txt adds it."""
    def request(framework: str | None, itype: str) -> rq.JobRequest:
        return rq.create(entry_point="train.py", source_dir=src, instance_count=2, distribution=MPI,
                         instance_type=itype, output_path=src.parent / "out", job_name="mpi",
                         framework_version=framework)
    assert preflight.mpi_warnings(request(None, "ml.g5.xlarge")) == []  # the default world (the CPU image's)
    assert preflight.mpi_warnings(request("2.13", "ml.m5.xlarge")) == []
    (warning,) = preflight.mpi_warnings(request("2.13", "ml.g5.xlarge"))
    assert "the PyTorch 2.13.0 GPU DLC does not ship mpi4py" in warning and "No module named mpi4py" in warning
    (src / "requirements.txt").write_text("mpi4py\n")
    assert preflight.mpi_warnings(request("2.13", "ml.g5.xlarge")) == []


def named_world(req: rq.JobRequest) -> World:
    """A world whose modules are named after the distributions (the DLC image's, and the requirements
    file's lines): what a test can say without installing them."""
    from emulator.backends import jobenv
    from emulator.job import dlc

    path = jobenv.requirements_of(req.source_dir, req.requirements_file)
    lines = path.read_text().splitlines() if path is not None else []
    names = [line.split("#")[0].split("=")[0].split("<")[0].split(">")[0].strip() for line in lines]
    required = {m for n in names if n for m in dlc.import_names(n)}
    return World(frozenset(req.dlc_image.modules() | {"numpy", "boto3"}), frozenset(required))


def test_lightning_import_without_requirements_warns(src: Path) -> None:
    """No PyTorch DLC ships Lightning (emulator/job/dlc_images.json, from aws/deep-learning-containers):
    a source dir that imports it without a requirements.txt naming it fails on SageMaker at the import."""
    (src / "train.py").write_text("import os\nimport pytorch_lightning\nimport helper\n")
    (src / "helper.py").write_text("from transformers import AutoModel\n")
    req = rq.create(entry_point="train.py", source_dir=src, output_path=src.parent / "out", job_name="pl")
    assert preflight.undeclared_imports(req, named_world(req)) == (["pytorch_lightning", "transformers"], {})
    (warning, _) = preflight.package_warnings(req, named_world(req))
    assert "ModuleNotFoundError: No module named 'pytorch_lightning'" in warning
    assert "requirements.txt" in warning and "pip install" not in warning
    (src / "requirements.txt").write_text("pytorch-lightning==2.6.6  # the job environment installs it\n"
                                          "transformers\n")
    assert preflight.undeclared_imports(req, named_world(req)) == ([], {})


def test_dlc_packages_need_no_requirements(src: Path) -> None:
    """What the DLC ships is no warning: the torch 1.12 DLC installs torchvision, scikit-learn, pandas
    and opencv-python (aws/deep-learning-containers pytorch/training/docker/1.12/py3/cu116/Dockerfile.gpu),
    the 2.13 one the same (its docker/pytorch/2.13/cpu/pyproject.toml)."""
    (src / "train.py").write_text("import torchvision, sklearn, pandas, cv2, numpy, boto3\n"
                                  "try:\n    import deepspeed_not_there\nexcept ImportError:\n    pass\n")
    for version in ("1.12", "2.13", None):
        req = rq.create(entry_point="train.py", source_dir=src, output_path=src.parent / "out", job_name="dlc",
                        framework_version=version)
        assert preflight.undeclared_imports(req, named_world(req)) == ([], {}), version


def test_a_dlc_module_that_does_not_install_here_is_the_emulators_gap(src: Path) -> None:
    """flash-attn is in the PyTorch 2.5 GPU DLC and CUDA-only: a warning that says so, not the job's fault."""
    (src / "train.py").write_text("import flash_attn\n")
    req = rq.create(entry_point="train.py", source_dir=src, output_path=src.parent / "out", job_name="gap",
                    framework_version="2.5.1", instance_type="ml.g5.xlarge")
    world = World(frozenset({"torch"}))
    missing, gaps = preflight.undeclared_imports(req, world)
    assert missing == [] and list(gaps) == ["flash_attn"] and "CUDA-only" in gaps["flash_attn"]
    (warning,) = preflight.package_warnings(req, world)
    assert "ships but the emulator cannot install here" in warning and "on SageMaker the import works" in warning


def test_examples_declare_what_the_dlc_lacks() -> None:
    """Every example runs on SageMaker as it is: what its entry point imports is the DLC's or in
    its requirements.txt (bert_lightning needs transformers too)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    checked = 0
    for launcher in sorted(examples.glob("*/launch.py")):
        src = launcher.parent / "code" if (launcher.parent / "code").is_dir() else launcher.parent
        req = rq.create(entry_point="train.py", source_dir=src, output_path=src.parent / "out", job_name="ex",
                        instance_type="ml.p4d.24xlarge")  # their launchers' (SMDDP on the GPU image)
        assert preflight.undeclared_imports(req, named_world(req)) == ([], {}), src
        checked += 1
    assert checked >= 5
    bert = (examples / "bert_lightning" / "requirements.txt").read_text()
    assert "transformers" in bert and "pytorch-lightning" in bert
