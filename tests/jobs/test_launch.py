"""``python -m emulator launch``: an unmodified SDK v2 launcher runs its 2-host job on the emulator."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from ..conftest import import_or_skip, require_mpi

import_or_skip("sagemaker")
import_or_skip("moto")

#: A 2-host job takes ~40-70 s on 2 shared cores (two torch imports per host).
LAUNCH_TIMEOUT = 300

# Each rank reports into SM_MODEL_DIR (merged into model.tar.gz): under MPI, a rank's print can
# reach the console split across mpirun's --tag-output fragments, a file cannot.
TRAIN = """\
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
report = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": int(t.item()), "argv": sys.argv[1:],
          "channels": [sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])),
                       sorted(os.listdir(os.environ["SM_CHANNEL_LOCAL"]))]}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{dist.get_rank()}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
"""

# An SDK v2 launcher as users write it: nothing in it knows about the emulator.
LAUNCHER = """\
import sys
import sagemaker
from sagemaker.pytorch import PyTorch

session = sagemaker.Session()
role = sagemaker.get_execution_role()
train = session.upload_data(sys.argv[1] + "/data", key_prefix="launch-test/train")
estimator = PyTorch(
    entry_point="train.py",
    source_dir=sys.argv[1] + "/src",
    role=role,
    image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.3.0-gpu-py311-cu121-ubuntu20.04-sagemaker",
    instance_count=2,
    instance_type="ml.p4d.24xlarge",
    distribution=DISTRIBUTION,
    hyperparameters={"epochs": 2},
    sagemaker_session=session,
)
estimator.fit({"train": train, "local": "file://" + sys.argv[1] + "/data"})
print("MODEL_DATA", estimator.model_data)
print("STATUS", estimator.latest_training_job.describe()["TrainingJobStatus"])
"""


def _launch(tmp_path: Path, distribution: str, **extra_env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("1,2\n")
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER.replace("DISTRIBUTION", distribution))
    s3 = tmp_path / "s3"
    env = {**os.environ, "SAGEMAKER_EMULATOR_S3_DIR": str(s3), "SAGEMAKER_EMULATOR_GPUS_PER_HOST": "1",
           "SAGEMAKER_SUPPRESS_V2_WARNING": "1", **extra_env}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "emulator", "launch", str(launcher), str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # fit() stops the job and tears its hosts down
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        err += f"\n(launcher timed out after {LAUNCH_TIMEOUT} s)"
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), s3


def _check(done: subprocess.CompletedProcess[str], s3: Path) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "STATUS Completed" in out
    # the launcher's stdout also carries the hosts' streamed logs: matched anywhere, not per line
    [model_uri] = re.findall(r"MODEL_DATA (s3://\S+)", out)
    assert model_uri.startswith("s3://sagemaker-us-west-2-123456789012/")
    # the model outlives the launcher: a file under the S3 folder, with every rank's report
    model = s3 / model_uri[len("s3://"):]
    with tarfile.open(model) as tar:
        reports = [json.load(tar.extractfile(m)) for m in tar.getmembers()  # type: ignore[arg-type]
                   if m.name.split("/")[-1].startswith("rank-")]
    assert sorted(r["rank"] for r in reports) == [0, 1]
    for r in reports:
        assert r["world"] == 2 and r["sum"] == 3  # all_reduce across both hosts
        assert r["argv"] == ["--epochs", "2"]
        assert r["channels"] == [["rows.csv"], ["rows.csv"]]


def test_torch_distributed_launcher_completes(tmp_path: Path) -> None:
    done, s3 = _launch(tmp_path, '{"torch_distributed": {"enabled": True}}')
    _check(done, s3)
    assert "[algo-2]" in done.stdout


@pytest.mark.slow  # the toolkit's SMDataParallel runner: mpirun over ssh between the hosts
def test_pytorchddp_launcher_completes(tmp_path: Path) -> None:
    require_mpi()
    # the ci profile (SAGEMAKER_EMULATOR_PROFILE): the toolkit's 30-s sleeps after mpirun capped
    done, s3 = _launch(tmp_path, '{"pytorchddp": {"enabled": True}}', SAGEMAKER_EMULATOR_PROFILE="ci")
    _check(done, s3)
    (job,) = s3.rglob("job.json")
    assert any("sleeps capped" in d for d in json.loads(job.read_text())["Emulator"]["Deviations"])


def test_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "emulator", "launch", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "does not exist" in done.stderr


def test_unknown_profile_is_refused_before_the_launcher_runs(tmp_path: Path) -> None:
    launcher = tmp_path / "launch.py"
    launcher.write_text("open('ran', 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "emulator", "launch", str(launcher)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "SAGEMAKER_EMULATOR_PROFILE": "fast"})
    assert done.returncode == 2 and "SAGEMAKER_EMULATOR_PROFILE" in done.stderr and "exact" in done.stderr
    assert not (tmp_path / "ran").exists()
