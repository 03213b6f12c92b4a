"""``framework_version`` end to end: the request, both backends, ``job.json``, ``plan``.

Oracles: what the training script itself reports inside the hosts (``torch.__version__``,
``sys.version``, ``pytorch_lightning.__version__``, the process group backend, the world size),
the real toolkit's own ``pip install -r requirements.txt`` output, the SDK's own image URI for
``framework_version="1.12.1"``/``py_version="py38"`` (``…/pytorch-training:1.12.1-gpu-py38``), and
AWS's DLC facts cited in emulator/job/frameworks.py (1.12's DLC: Python 3.8; 2.13's: Python 3.12,
sagemaker-training 5.1.1).

The test suite runs SDK jobs with ``SAGEMAKER_EMULATOR_FRAMEWORK_VERSION=current``
(tests/conftest.py); these tests remove it where the launcher's framework must be honoured.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest

from emulator.backends import jobenv
from emulator.backends.docker import images
from emulator.errors import RequestError
from emulator.job import dlc, frameworks
from emulator.job import request as rq

from ..rank_output import marked_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist_lightning16_smddp"
FRAMEWORK_VAR = "SAGEMAKER_EMULATOR_FRAMEWORK_VERSION"
REPORT = """\
import json, os, sys, torch
from importlib import metadata
print("REPORT " + json.dumps({"torch": torch.__version__, "python": sys.version.split()[0],
      "executable": sys.executable, "toolkit": metadata.version("sagemaker-training"),
      "torch_file": torch.__file__}), flush=True)
"""


def _emulator(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, check=False, cwd=ROOT)


def _source(tmp_path: Path, script: str = REPORT, requirements: str | None = None) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text(script)
    if requirements is not None:
        (src / "requirements.txt").write_text(requirements)
    return src


# -- bad input: before anything starts, naming the field and what is allowed ----------------------
def test_request_validation_names_the_field(tmp_path: Path) -> None:
    src = _source(tmp_path)
    with pytest.raises(RequestError) as err:
        rq.create(entry_point="train.py", source_dir=src, framework_version="1.12.1", py_version="py39")
    assert err.value.field == "py_version" and err.value.allowed == "py38"
    with pytest.raises(RequestError) as err:
        rq.create(entry_point="train.py", source_dir=src, framework_version=1.12)  # type: ignore[arg-type]
    assert err.value.field == "framework_version" and "not a string" in str(err.value)
    with pytest.raises(RequestError) as err:
        rq.create(entry_point="train.py", source_dir=src, framework_version="1.10")
    assert "no CPU-runnable torch wheel" in str(err.value) and "1.12.1" in (err.value.allowed or "")
    ok = rq.create(entry_point="train.py", source_dir=src, framework_version="1.12.1", py_version="py38")
    assert ok.framework is not None and ok.framework.family is not None and ok.framework.family.name == "1.12"
    # The SDK sends the DLC URI it derived from framework_version/py_version; it means the same.
    sdk = rq.create(entry_point="train.py", source_dir=src,
                    image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.12.1-gpu-py38")
    assert sdk.framework is not None and sdk.framework.family == ok.framework.family
    assert rq.create(entry_point="train.py", source_dir=src).framework is None
    current = rq.create(entry_point="train.py", source_dir=src, framework_version="current",
                        image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:1.12.1-gpu-py38")
    assert current.framework is not None and current.framework.family is None  # current wins over the tag


@pytest.mark.skipif(sys.version_info[:2] <= (3, 10), reason="torch 1.12.1 has wheels for this Python")
def test_process_backend_refuses_torch_1_12_before_start(tmp_path: Path) -> None:
    src = _source(tmp_path)
    out = tmp_path / "out"
    for command in ("run", "plan"):
        done = _emulator(command, "--entry-point", "train.py", "--source-dir", str(src), "--output-dir", str(out),
                         "--framework-version", "1.12.1", "--py-version", "py38", "--job-name", "refused")
        assert done.returncode == 2, done.stdout + done.stderr
        here = f"{sys.version_info[0]}.{sys.version_info[1]}"
        assert "error: framework_version:" in done.stderr
        assert "torch 1.12.1" in done.stderr and f"Python {here}" in done.stderr
        assert "--backend docker" in done.stderr and "allowed:" in done.stderr
    assert not out.exists()  # nothing written, nothing started


def test_unknown_framework_version_is_refused_by_the_cli(tmp_path: Path) -> None:
    src = _source(tmp_path)
    done = _emulator("run", "--entry-point", "train.py", "--source-dir", str(src), "--output-dir",
                     str(tmp_path / "out"), "--framework-version", "9.9")
    assert done.returncode == 2
    assert "framework_version: unknown PyTorch framework version '9.9'" in done.stderr
    assert "1.12.1" in done.stderr and "current" in done.stderr
    assert not (tmp_path / "out").exists()


def test_sdk_job_the_process_backend_cannot_run_is_a_validation_error(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sagemaker")
    pytest.importorskip("moto")
    if sys.version_info[:2] <= (3, 10):
        pytest.skip("torch 1.12.1 has wheels for this Python")
    from botocore.exceptions import ClientError
    from sagemaker.pytorch import PyTorch

    from emulator.sdk.session import EmulatorSession

    monkeypatch.delenv(FRAMEWORK_VAR, raising=False)
    src = _source(tmp_path)
    session = EmulatorSession(region="us-west-2", s3_root=tmp_path / "s3")
    try:
        est = PyTorch(entry_point="train.py", source_dir=str(src), role="SageMakerRole", framework_version="1.12.1",
                      py_version="py38", instance_count=1, instance_type="ml.m5.xlarge", sagemaker_session=session)
        with pytest.raises(ClientError) as err:
            est.fit(wait=False)
    finally:
        session.close()
    text = str(err.value)
    assert "ValidationException" in text and "torch 1.12.1" in text and "--backend docker" in text
    assert not list((tmp_path / "s3").rglob("job.json"))


# -- process backend: a job environment with the framework's torch --------------------------------
def test_process_backend_runs_the_framework_torch_in_a_job_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Family 2.13 on a CPU type (the PyTorch 2.13.0 CPU DLC): the job runs in a job environment made
    for it, whose torch is the family's framework layer's, and job.json says what the script saw. The
    job environments' cache is empty (cold paths in the suite), so the environment is created by this
    job; the layers (GBs) are the machine's shared ones."""
    from emulator.backends import layers
    from emulator.supervisor import run

    monkeypatch.setattr(jobenv, "CACHE", tmp_path / "envs")
    src = _source(tmp_path)
    request = rq.create(entry_point="train.py", source_dir=src, output_path=tmp_path / "out",
                        job_name=f"fw-process-{uuid.uuid4().hex[:6]}", framework_version="2.13")
    install = jobenv.install_of(request)
    assert install.image.id == "pytorch-2.13-cpu" and install.torch[0] == "torch===2.13.0"
    result = run(request, backend="process", echo=False, stop_grace=5)
    assert result.status == "Completed", result.log("algo-1")[-3000:]
    [seen] = marked_json(result.log("algo-1"), "REPORT ")
    expected_python = jobenv.interpreter(src, None, install)
    assert seen["executable"] == expected_python != sys.executable  # the job environment, not yours
    assert Path(expected_python).is_relative_to(tmp_path / "envs")  # made now, not found in a cache
    assert Path(seen["torch_file"]).is_relative_to(layers.base_layer(install).path)  # the family's torch layer
    assert seen["torch"].split("+")[0] == "2.13.0"
    fw = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Framework"]
    # job.json reads the installed metadata (2.13.0); torch.__version__ adds PyPI's CUDA build's label
    assert (fw["Torch"], fw["Python"]) == (seen["torch"].split("+")[0], seen["python"])
    assert fw["FrameworkVersion"] == "2.13" and fw["Family"] == "2.13" and fw["Source"] == "framework_version"
    assert fw["Toolkit"]["sagemaker-training"] == seen["toolkit"] == "5.1.1"  # the DLC's (its uv.lock)
    assert fw["Image"]["Id"] == "pytorch-2.13-cpu"
    deviations = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Deviations"]
    here = ".".join(seen["python"].split(".")[:2])
    assert f"Python {here} runs instead of the DLC's 3.12 (this machine's interpreter)" in deviations


def test_no_framework_version_runs_the_default_world_and_says_so(tmp_path: Path) -> None:
    """No DLC named: the packages of the newest family's CPU DLC (emulator/job/dlc.py CURRENT_IMAGE),
    recorded as such in job.json."""
    from emulator.supervisor import run

    src = _source(tmp_path)
    request = rq.create(entry_point="train.py", source_dir=src, output_path=tmp_path / "out",
                        job_name=f"fw-none-{uuid.uuid4().hex[:6]}")
    result = run(request, backend="process", echo=False)
    assert result.status == "Completed", result.log("algo-1")[-3000:]
    [seen] = marked_json(result.log("algo-1"), "REPORT ")
    assert seen["executable"] == jobenv.interpreter(src, None, jobenv.install_of(request)) != sys.executable
    assert seen["torch"].split("+")[0] == "2.13.0"
    fw = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Framework"]
    assert fw["FrameworkVersion"] is None and fw["Source"] == "default" and fw["Image"]["Id"] == "pytorch-2.13-cpu"
    assert (fw["Torch"], fw["Python"]) == (seen["torch"].split("+")[0], seen["python"])
    assert any("no DLC named" in d for d in fw["Deviations"]), fw


# -- docker backend -----------------------------------------------------------------------------
IMAGE_1_12 = dlc.pytorch_image("1.12", gpu=True)  # the launcher's ml.p4d.24xlarge


def _image_1_12() -> str | None:
    try:
        return images.built_image(IMAGE_1_12)
    except Exception:  # no docker CLI or engine
        return None


def _need_image(request: pytest.FixtureRequest) -> str:
    request.getfixturevalue("docker_ready")
    tag = _image_1_12()
    if tag is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the torch 1.12 image is not built (.ci/setup builds it)")
        pytest.skip("the torch 1.12 image is not built (nox -s image -- --framework 1.12)")
    return tag


def _launch_flags(out: Path, name: str) -> list[str]:
    """The CLI flags of what examples/mnist_lightning16_smddp/launch.py asks the SDK for."""
    return ["--backend", "docker", "--entry-point", "train.py", "--source-dir", str(EXAMPLE / "code"),
            "--hosts", "2", "--instance-type", "ml.p4d.24xlarge", "--gpus-per-host", "2",
            "--distribution", '{"smdistributed": {"dataparallel": {"enabled": true}}}',
            "--hyperparameters", '{"epochs": 2}', "--channel", f"training={EXAMPLE / 'data' / 'training'}",
            "--framework-version", "1.12.1", "--py-version", "py38", "--output-dir", str(out), "--job-name", name]


@pytest.mark.docker
def test_2022_launcher_runs_unchanged_on_torch_1_12_lightning_1_6(tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    """The unchanged 2022-era launcher (framework_version="1.12.1", py_version="py38",
    pytorch-lightning==1.6.3 in requirements.txt) completes through ``python -m emulator launch`` on
    the docker backend, 2 hosts x 2 emulated GPUs with smddp, on torch 1.12 and Lightning 1.6.3."""
    tag = _need_image(request)
    env = {k: v for k, v in os.environ.items() if k != FRAMEWORK_VAR}
    env.update(SAGEMAKER_EMULATOR_BACKEND="docker", SAGEMAKER_EMULATOR_GPUS_PER_HOST="2",
               SAGEMAKER_EMULATOR_S3_DIR=str(tmp_path / "s3"))
    done = subprocess.run([sys.executable, "-m", "emulator", "launch", str(EXAMPLE / "launch.py")],
                          capture_output=True, text=True, env=env, timeout=1800, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    [job_json] = list((tmp_path / "s3").rglob("job.json"))
    job = job_json.parent
    desc = json.loads(job_json.read_text())
    assert desc["TrainingJobStatus"] == "Completed"
    assert desc["AlgorithmSpecification"]["TrainingImage"].endswith("/pytorch-training:1.12.1-gpu-py38")
    log = (job / "logs" / "algo-1.log").read_text()
    # the script's own report (rank 0), and its loss going down (from its metrics file: mpirun tags each
    # chunk of output it forwards, and another rank's chunk may come before a printed line's end)
    assert "lightning=1.6.3 torch=1.12.1+cu102 backend=smddp world_size=4 num_nodes=2" in log
    with tarfile.open(job / "output" / "output.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("metrics.json"))
        metrics = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
    assert metrics["world_size"] == 4 and metrics["lightning"] == "1.6.3"
    assert metrics["last_loss"] < metrics["first_loss"]
    # the toolkit's own pip install ran offline from the wheelhouse and kept the image's torch
    for host in ("algo-1", "algo-2"):
        host_log = (job / "logs" / f"{host}.log").read_text()
        assert "Processing /opt/sm-emulator/wheelhouse/pytorch_lightning-1.6.3-py3-none-any.whl" in host_log
        installed = next(line for line in host_log.splitlines() if "Successfully installed" in line)
        assert "pytorch-lightning-1.6.3" in installed and not re.search(r"(?<![\w-])torch-\d", installed)
    with tarfile.open(job / "output" / "model.tar.gz") as tar:
        assert "model.pt" in tar.getnames()
    fw = desc["Emulator"]["Framework"]
    assert fw["FrameworkVersion"] == "1.12.1" and fw["PyVersion"] == "py38" and fw["Source"] == "image_uri"
    assert fw["Torch"] == "1.12.1" and fw["Python"].startswith("3.9.")
    assert "Python 3.9 runs instead of the DLC's 3.8 (Debian bullseye's python3)" in desc["Emulator"]["Deviations"]
    spec = json.loads((job / "launch-spec.json").read_text())
    assert [h["image"] for h in spec["hosts"]] == [tag, tag]
    for host in spec["hosts"]:
        mounts = {m["target"]: m for m in host["mounts"]}
        assert mounts["/opt/sm-emulator/wheelhouse"]["read_only"] and mounts["/etc/pip.conf"]["read_only"]
    assert "pending" not in spec["options"]

    # `plan` with the same request prints the launch that ran (image, wheelhouse, environment)
    planned = _emulator("plan", *_launch_flags(tmp_path / "plan-out", "fw-plan"))
    assert planned.returncode == 0, planned.stderr
    launch = json.loads(planned.stdout)["launch"]
    assert "pending" not in launch["options"]
    assert {k: v for k, v in launch["options"]["framework"].items() if k != "Source"} == \
        {k: v for k, v in spec["options"]["framework"].items() if k != "Source"}
    job_specific = {"TRAINING_JOB_NAME", "TRAINING_JOB_ARN"}
    for plan_host, run_host in zip(launch["hosts"], spec["hosts"], strict=True):
        assert plan_host["image"] == run_host["image"]
        assert [m for m in plan_host["mounts"] if m["target"] in ("/opt/sm-emulator/wheelhouse", "/etc/pip.conf")] \
            == [m for m in run_host["mounts"] if m["target"] in ("/opt/sm-emulator/wheelhouse", "/etc/pip.conf")]
        assert {k: v for k, v in plan_host["environment"].items() if k not in job_specific} == \
            {k: v for k, v in run_host["environment"].items() if k not in job_specific}


@pytest.mark.docker
def test_plan_says_what_prepare_will_do_for_an_image_not_built(tmp_path: Path,
                                                               request: pytest.FixtureRequest) -> None:
    """A DLC image not built: ``plan`` builds nothing and says the build comes first."""
    request.getfixturevalue("docker_ready")
    image = next((dlc.pytorch_image(f.name, gpu=False) for f in frameworks.FAMILIES
                  if images.built_image(dlc.pytorch_image(f.name, gpu=False)) is None), None)
    if image is None:
        pytest.skip("every family's CPU image is built here")
    planned = _emulator("plan", "--backend", "docker", "--entry-point", "train.py", "--source-dir",
                        str(_source(tmp_path, requirements="six\n")), "--framework-version", image.framework_version,
                        "--output-dir", str(tmp_path / "out"), "--job-name", "fw-pending")
    assert planned.returncode == 0, planned.stderr
    launch = json.loads(planned.stdout)["launch"]
    pending = " | ".join(launch["options"]["pending"])
    assert f"the image of {image.label} is built before the job starts" in pending
    assert "requirements.txt is resolved into a wheelhouse" in pending
    assert launch["hosts"][0]["image"].startswith(f"sagemaker-emulator:{image.id}-")
    assert images.built_image(image) is None  # nothing was built
    assert not (tmp_path / "out").exists()


@pytest.mark.docker
@pytest.mark.xdist_group("machine-wide-reap")  # not beside test_kept's `python -m emulator reap`
def test_reap_removes_helper_containers_whose_owner_is_gone(request: pytest.FixtureRequest) -> None:
    """Wheelhouse/probe helpers carry owner labels: those whose owner is gone are removed, those of a
    live owner stay, and a container without owner labels is not the reaper's to judge."""
    request.getfixturevalue("docker_ready")
    from emulator.backends.docker import engine
    from emulator.backends.docker import reaper as helpers

    gone = subprocess.Popen(["true"])
    gone.wait()
    tag = uuid.uuid4().hex[:6]
    dead_labels = {**helpers.labels("wheelhouse"), "sagemaker-emulator.owner-pid": str(gone.pid)}
    made = {
        f"sm-emulator-test-dead-{tag}": dead_labels,
        f"sm-emulator-test-unowned-{tag}": {"sagemaker-emulator.helper": "other"},
        f"sm-emulator-test-live-{tag}": helpers.labels("probe"),
    }
    try:
        for name, labels in made.items():
            args = [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
            started = subprocess.run(["docker", "run", "-d", "--rm", "--name", name, *args, "--network", "none",
                                      "--entrypoint", "sleep", "sagemaker-emulator:latest", "300"],
                                     capture_output=True, text=True)
            assert started.returncode == 0, started.stderr
        removed = "\n".join(helpers.reap(engine.client()))
        assert f"sm-emulator-test-dead-{tag}" in removed
        assert f"sm-emulator-test-live-{tag}" not in removed and f"sm-emulator-test-unowned-{tag}" not in removed
        left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True,
                              text=True).stdout.split()
        assert f"sm-emulator-test-live-{tag}" in left and f"sm-emulator-test-dead-{tag}" not in left
    finally:
        subprocess.run(["docker", "rm", "-f", *made], capture_output=True)


def test_the_example_ships_its_data() -> None:
    """Nothing downloads: the MNIST-shaped data the script reads ship with the example."""
    import numpy as np

    with np.load(EXAMPLE / "data" / "training" / "mnist.npz") as data:
        assert data["images"].shape == (1024, 28, 28) and data["labels"].shape == (1024,)
    assert "pytorch-lightning==1.6.3" in (EXAMPLE / "code" / "requirements.txt").read_text().splitlines()
