"""Golden tests of the plan: files and SM_* values for a 2-host ml.p4d.24xlarge job (2 GPUs).

Expected values are written by hand from public sources, not computed by the code under test: the
``resourceconfig.json`` shape real jobs log (with the ``current_group_name``/``instance_groups`` keys
that sagemaker-training 5.1.4 reads in ``src/sagemaker_training/environment.py``), hyperparameters
as JSON strings as the SageMaker Python SDK v2 sends them (``sagemaker/estimator.py``,
``_json_encode_hyperparameters``), the ``SM_*`` variables of sagemaker-training 5.1.4
(``environment.py``, ``Environment.to_env_vars``) and its torchrun command line
(``torch_distributed.py``). One test also checks the prediction against the real toolkit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.backends.base import Runtime, host_addresses, hosts_file
from emulator.inhost import GPU_BIN
from emulator.job import plan as planning
from emulator.job import request as rq

ENTRY = "train.py"


@pytest.fixture()
def p4d_plan(tmp_path: Path) -> planning.JobPlan:
    src = tmp_path / "src"
    src.mkdir()
    (src / ENTRY).write_text("print('hi')\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("1\n")
    req = rq.create(entry_point=ENTRY, source_dir=src, instance_count=2, instance_type="ml.p4d.24xlarge",
                    gpus_per_host=2, distribution={"torch_distributed": {"enabled": True}},
                    hyperparameters={"epochs": 2, "model-name": "resnet", "bf16": True},
                    channels={"training": data}, output_path=tmp_path / "out", job_name="golden-job",
                    pass_env=["WANDB_PROJECT"])
    runtime = Runtime(python="/usr/bin/python3", train_command=("train",), inhost_root="/inhost",
                      base_env={"HOME": "/root"}, path="/usr/bin")
    caller = {"PATH": "/home/me/bin", "AWS_SECRET_ACCESS_KEY": "leak", "RANK": "3", "HF_TOKEN": "secret",
              "WANDB_PROJECT": "demo"}
    return planning.build(req, runtime=runtime, caller_env=caller, num_cpus=2)


def test_resourceconfig_is_the_real_shape(p4d_plan: planning.JobPlan) -> None:
    host = p4d_plan.hosts[1]
    rc = json.loads(host.files["input/config/resourceconfig.json"])
    assert list(rc) == ["current_host", "current_instance_type", "current_group_name", "hosts",
                        "instance_groups", "network_interface_name", "topology"]
    assert rc == {
        "current_host": "algo-2", "current_instance_type": "ml.p4d.24xlarge",
        "current_group_name": "homogeneousCluster", "hosts": ["algo-1", "algo-2"],
        "instance_groups": [{"instance_group_name": "homogeneousCluster",
                             "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-1", "algo-2"]}],
        "network_interface_name": "eth0", "topology": None,
    }


def test_hyperparameters_are_json_strings_as_the_sdk_sends(p4d_plan: planning.JobPlan) -> None:
    hps = json.loads(p4d_plan.hosts[0].files["input/config/hyperparameters.json"])
    assert hps == {
        "epochs": "2", "model-name": '"resnet"', "bf16": "true",
        "sagemaker_torch_distributed_enabled": "true",
        "sagemaker_instance_type": '"ml.p4d.24xlarge"',
        "sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_container_log_level": "20", "sagemaker_job_name": '"golden-job"',
        "sagemaker_region": '"us-west-2"',
    }
    idc = json.loads(p4d_plan.hosts[0].files["input/config/inputdataconfig.json"])
    assert idc == {"training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                "RecordWrapperType": "None"}}


def test_sm_values_hand_checked(p4d_plan: planning.JobPlan) -> None:
    sm = p4d_plan.hosts[1].sm_env
    assert sm["SM_HOSTS"] == '["algo-1","algo-2"]'
    assert sm["SM_CURRENT_HOST"] == "algo-2"
    assert sm["SM_NUM_GPUS"] == "2"
    assert sm["SM_NETWORK_INTERFACE_NAME"] == "eth0"
    assert sm["SM_HPS"] == '{"bf16":true,"epochs":2,"model-name":"resnet"}'
    assert sm["SM_HP_MODEL-NAME"] == "resnet"  # dashes kept
    assert sm["SM_HP_BF16"] == "true"
    assert sm["SM_FRAMEWORK_PARAMS"] == ('{"sagemaker_instance_type":"ml.p4d.24xlarge",'
                                         '"sagemaker_torch_distributed_enabled":true}')
    assert sm["SM_USER_ARGS"] == '["--bf16","True","--epochs","2","--model-name","resnet"]'
    assert sm["SM_CHANNELS"] == '["training"]'
    assert sm["SM_CHANNEL_TRAINING"] == "/opt/ml/input/data/training"
    assert sm["SM_CURRENT_INSTANCE_GROUP"] == "homogeneousCluster"
    assert sm["SM_CURRENT_INSTANCE_GROUP_HOSTS"] == '["algo-1","algo-2"]'
    assert sm["SM_DISTRIBUTION_INSTANCE_GROUPS"] == '["homogeneousCluster"]'
    assert sm["SM_IS_HETERO"] == "false"
    assert sm["SM_MODULE_NAME"] == "train"
    assert sm["SM_USER_ENTRY_POINT"] == "train.py"
    assert sm["SM_MODEL_DIR"] == "/opt/ml/model"
    assert sm["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data"
    assert sm["SM_LOG_LEVEL"] == "20"


def test_launcher_is_the_toolkits_torchrun(p4d_plan: planning.JobPlan) -> None:
    assert p4d_plan.runner == "torch_distributed"
    assert p4d_plan.hosts[1].launcher == [
        "torchrun", "--nnodes", "2", "--nproc_per_node", "2", "--master_addr", "algo-1",
        "--master_port", "7777", "--node_rank", "1", "train.py",
        "--bf16", "True", "--epochs", "2", "--model-name", "resnet"]


def test_environment_is_an_allowlist(p4d_plan: planning.JobPlan) -> None:
    """Only the image's, the platform's and the named variables reach a host."""
    env = p4d_plan.hosts[0].env
    assert "AWS_SECRET_ACCESS_KEY" not in env and "RANK" not in env and "HF_TOKEN" not in env
    assert env["WANDB_PROJECT"] == "demo"  # named in pass_env
    # the image's PATH, not the caller's, after the in-host stand-ins a p4d host has (nvidia-smi, smddprun)
    assert env["PATH"] == "/inhost/gpu/bin:/inhost/smddp/bin:/usr/bin"
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == "/dev/null"
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    assert env["TRAINING_JOB_NAME"] == "golden-job"
    assert env["TRAINING_JOB_ARN"].endswith(":training-job/golden-job")
    assert env["EMULATOR_GPU_COUNT"] == "2"
    assert hosts_file(host_addresses("10.0.0.0/24", ["algo-1", "algo-2"])).splitlines()[-2:] == [
        "10.0.0.2\talgo-1", "10.0.0.3\talgo-2"]


def test_prediction_matches_the_real_toolkit(p4d_plan: planning.JobPlan, tmp_path: Path) -> None:
    """The pinned toolkit, run on the planned files with a fake nvidia-smi, computes the same SM_*."""
    host = p4d_plan.hosts[1]
    base = tmp_path / "opt" / "ml"
    for rel, text in host.files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    env = {**os.environ, "SAGEMAKER_BASE_DIR": str(base), "PATH": f"{GPU_BIN}:{os.environ['PATH']}",
           "EMULATOR_GPU_COUNT": "2", "SAGEMAKER_TRAINING_MODULE": host.env["SAGEMAKER_TRAINING_MODULE"]}
    code = ("import json; from sagemaker_training import environment as e; "
            "print(json.dumps(e.Environment().to_env_vars()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    real = json.loads(out.stdout.strip().splitlines()[-1])
    for key, value in host.sm_env.items():
        if key in ("SM_NUM_CPUS",):
            continue
        expected = value.replace("/opt/ml", str(base)) if key not in ("SM_MODULE_DIR",) else value
        assert real[key] == expected, key
    assert set(real) - set(host.sm_env) == {"SM_TRAINING_ENV"}
