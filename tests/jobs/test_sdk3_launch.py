"""``python -m emulator launch`` with SDK v3: an unchanged ``ModelTrainer`` launcher runs its 2-host job;
the SDK major is detected, and a v2+v3 mix is refused before anything runs.

The launcher and script below are what a v3 user writes for SageMaker (nothing in them knows about
the emulator): ``Session()``, ``get_execution_role()``, ``ModelTrainer`` with ``Torchrun()`` on
2 x ml.g5.12xlarge, a local-folder ``InputData``, hyperparameters with a space, an nccl script with
``torch.cuda.set_device(LOCAL_RANK)``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.sdk.versions import installed_major

#: A 2-host job takes ~1-3 min on 2 shared cores (torch imports per rank).
LAUNCH_TIMEOUT = 600

TRAIN = """\
import json, os, socket, sys
import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
t = torch.ones(1).cuda()
dist.all_reduce(t)
print("RANK " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "host": socket.gethostname(),
      "local_rank": local_rank, "sum": int(t.item()), "argv": sys.argv[1:],
      "files": sorted(os.listdir(os.environ["SM_CHANNEL_TRAINING"]))}), flush=True)
if dist.get_rank() == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "sum.txt"), "w") as f:
        f.write(str(int(t.item())))
dist.destroy_process_group()
"""

LAUNCHER = """\
import sys
from sagemaker.core.helper.session_helper import Session, get_execution_role
from sagemaker.core.training.configs import Compute, InputData, SourceCode
from sagemaker.train import ModelTrainer
from sagemaker.train.distributed import Torchrun

trainer = ModelTrainer(
    training_image="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker",
    source_code=SourceCode(source_dir=sys.argv[1] + "/src", entry_script="train.py"),
    compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
    distributed=Torchrun(),
    hyperparameters={"epochs": 2, "run_name": "hello world"},
    role=get_execution_role(),
    sagemaker_session=Session(),
)
trainer.train(input_data_config=[InputData(channel_name="training", data_source=sys.argv[1] + "/data")])
print("MODEL", trainer._latest_training_job.model_artifacts.s3_model_artifacts)
"""


def _env(s3: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"SAGEMAKER_EMULATOR_S3_DIR": str(s3), "SAGEMAKER_EMULATOR_GPUS_PER_HOST": "2", **extra})
    return env


@pytest.mark.slow
@pytest.mark.skipif(installed_major() != 3, reason="needs SageMaker Python SDK v3 (nox -s tests_sdk3)")
def test_an_unchanged_v3_launcher_runs_its_two_host_torchrun_job(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "data" / "shards").mkdir(parents=True)
    (tmp_path / "data" / "index.json").write_text("{}")
    (tmp_path / "data" / "shards" / "part-0").write_text("x")  # S3 keeps no empty folders
    (tmp_path / "launch.py").write_text(LAUNCHER)
    done = subprocess.run([sys.executable, "-m", "emulator", "launch", str(tmp_path / "launch.py"), str(tmp_path)],
                          env=_env(tmp_path / "s3"), capture_output=True, text=True, timeout=LAUNCH_TIMEOUT,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (uri,) = re.findall(r"^MODEL (s3://\S+)$", done.stdout, re.MULTILINE)
    bucket, key = uri[5:].split("/", 1)
    assert (tmp_path / "s3" / bucket / key).is_file()  # readable under the emulator's S3 folder
    decoder = json.JSONDecoder()  # ranks' lines may share a line when they print at once
    ranks = sorted((decoder.raw_decode(done.stdout, m.end())[0] for m in re.finditer(r"RANK (?=\{)", done.stdout)),
                   key=lambda r: r["rank"])
    assert [(r["rank"], r["host"], r["local_rank"]) for r in ranks] == [
        (0, "algo-1", 0), (1, "algo-1", 1), (2, "algo-2", 0), (3, "algo-2", 1)]
    for r in ranks:
        assert r["world"] == 4 and r["sum"] == 4
        assert r["argv"] == ["--epochs", "2", "--run_name", "hello world"]  # the v3 driver's --key value
        assert r["files"] == ["index.json", "shards"]


def _fake_sdk(root: Path, *, v2_files: bool, v3_files: bool, version: str | None) -> Path:
    """A `sagemaker` package (and optionally its dist-info) on a path that shadows the real one."""
    pkg = root / "sagemaker"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    if v2_files:
        (pkg / "estimator.py").write_text("")
    if v3_files:
        (pkg / "train").mkdir()
        (pkg / "train" / "__init__.py").write_text("")
    if version:
        info = root / f"sagemaker-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sagemaker\nVersion: {version}\n")
    return root


@pytest.mark.parametrize(("v2_files", "v3_files", "version", "says"), [
    (True, True, None, "has both v2 files (estimator.py) and v3 files (train/)"),
    (True, False, "3.27.0", "(v3) is installed but the package still has v2 files"),
])
def test_v2_and_v3_installed_together_are_refused(tmp_path: Path, v2_files: bool, v3_files: bool,
                                                  version: str | None, says: str) -> None:
    site = _fake_sdk(tmp_path / "site", v2_files=v2_files, v3_files=v3_files, version=version)
    (tmp_path / "launch.py").write_text("raise SystemExit('the launcher must not run')\n")
    repo = Path(__file__).resolve().parents[2]
    env = _env(tmp_path / "s3", PYTHONPATH=os.pathsep.join([str(site), str(repo)]))
    done = subprocess.run([sys.executable, "-m", "emulator", "launch", str(tmp_path / "launch.py")], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "SageMaker Python SDK v2 and v3 are both installed" in done.stderr and says in done.stderr
    assert "must not run" not in done.stderr and not (tmp_path / "s3").exists()
