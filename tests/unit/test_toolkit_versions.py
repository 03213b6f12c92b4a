"""The launcher prediction follows the toolkit release that runs (emulator/job/toolkit_model.py).

The framework images of the DLC families 2.11 to 2.13 hold sagemaker-training 5.1.1 (AWS's
``docker/pytorch/2.1x/cpu/uv.lock``), which launches differently from the pinned 5.1.4.

Oracles: sagemaker-training-toolkit's ``src/sagemaker_training/process.py``
(github.com/aws/sagemaker-training-toolkit; up to 5.1.2 the command runs
through ``asyncio.create_subprocess_shell(" ".join(cmd))``; a COMMAND entry point is
``["/bin/sh", "-c", '"./<entry> <args>"']``) and the released sources of 5.1.1 and 5.1.4 on PyPI
(``process.py``: ``python -- script.py`` only from 5.1.4 on; ``__init__.py``: 5.1.1's EFA lists
lack ml.p5e.48xlarge for NCCL and ml.p5/p5e.48xlarge for RDMA). The last test runs the real
5.1.1 runner (its sdist from PyPI, skipped without one) and compares what the script saw.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from emulator.backends.base import Runtime
from emulator.job import distribution as dist
from emulator.job import plan as planning
from emulator.job import request as rq
from emulator.job import toolkit_model as tk

from ..rank_output import marked_json

RC = {"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "current_instance_type": "ml.p5.48xlarge",
      "current_group_name": "homogeneousCluster", "network_interface_name": "eth0",
      "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.p5.48xlarge",
                           "hosts": ["algo-1", "algo-2"]}]}


def _hps(entry: str = "train.py", **extra: Any) -> dict[str, str]:
    return {k: dist.encode(v) for k, v in {"sagemaker_program": entry, "msg": "a b", **extra}.items()}


def test_release_parsing() -> None:
    assert tk.toolkit_release("5.1.1") == (5, 1, 1)
    assert tk.toolkit_release("5.1.1.dev0") == (5, 1, 1)
    assert tk.toolkit_release("5.1.4+local") == (5, 1, 4)


def test_python_script_5_1_4_execs_with_dashdash() -> None:
    cmd = tk.launcher_command("process", RC, _hps(), num_gpus=0, python="/py", toolkit="5.1.4")
    assert cmd == ["/py", "--", "train.py", "--msg", "a b"]


def test_python_script_5_1_1_runs_through_a_shell() -> None:
    cmd = tk.launcher_command("process", RC, _hps(), num_gpus=0, python="/py", toolkit="5.1.1")
    # create_subprocess_shell(" ".join([python, "train.py", "--msg", "a b"])): the shell splits "a b"
    assert cmd == ["/bin/sh", "-c", "/py train.py --msg a b"]
    native = _hps(sagemaker_toolkit_native_launcher_enabled=True)
    # capture_error=False: subprocess.Popen(cmd) after cmd[-1].strip('"') (no shell)
    assert tk.launcher_command("process", RC, native, num_gpus=0, python="/py", toolkit="5.1.1") == [
        "/py", "train.py", "--msg", "a b"]


def test_torchrun_5_1_1_is_always_a_shell() -> None:
    # run(wait, capture_error) lands in run(capture_error, wait): capture is on even with the
    # native launcher, and process.create runs a shell up to 5.1.2 as well.
    torchrun = {"sagemaker_torch_distributed_enabled": True}
    for hps in (_hps(**torchrun), _hps(**torchrun, sagemaker_toolkit_native_launcher_enabled=True)):
        cmd = tk.launcher_command("torch_distributed", RC, hps, num_gpus=8, python="/py", toolkit="5.1.1")
        assert cmd == ["/bin/sh", "-c", "torchrun --nnodes 2 --nproc_per_node 8 --master_addr algo-1 "
                                        "--master_port 7777 --node_rank 0 train.py --msg a b"]
    assert tk.launcher_command("torch_distributed", RC, _hps(), num_gpus=8, python="/py", toolkit="5.1.4")[:1] == [
        "torchrun"]


def test_shell_entry_point_keeps_its_quotes_up_to_5_1_2() -> None:
    cmd = tk.launcher_command("process", RC, _hps("run.sh"), num_gpus=0, python="/py", toolkit="5.1.1")
    assert cmd == ["/bin/sh", "-c", '/bin/sh -c "./run.sh --msg a b"']


def test_efa_lists_of_5_1_1() -> None:
    framework = {"sagemaker_instance_type": "ml.p5.48xlarge"}
    new = tk.mpirun_command("smdataparallel", ["algo-1", "algo-2"], framework, RC, pph=8, entry="train.py",
                            args=[], toolkit="5.1.4")
    old = tk.mpirun_command("smdataparallel", ["algo-1", "algo-2"], framework, RC, pph=8, entry="train.py",
                            args=[], toolkit="5.1.1")
    assert "FI_EFA_USE_DEVICE_RDMA=1" in new and "FI_EFA_USE_DEVICE_RDMA=1" not in old
    assert "NCCL_PROTO=simple" in new and "NCCL_PROTO=simple" in old  # p5 is in both NCCL lists


def test_unknown_toolkit_is_not_predicted() -> None:
    assert tk.launcher_command("process", RC, _hps(), num_gpus=0, python="/py", toolkit=None) is None


def test_plan_follows_the_runtime_toolkit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("")
    req = rq.create(entry_point="train.py", source_dir=src, output_path=tmp_path / "out", job_name="tk-plan",
                    hyperparameters={"msg": "a b"})
    runtime = Runtime(python="/py", train_command=("train",), inhost_root="/inhost", base_env={}, path="/bin")
    assert planning.build(req, runtime=runtime).hosts[0].launcher == ["/py", "--", "train.py", "--msg", "a b"]
    old = Runtime(python="/py", train_command=("train",), inhost_root="/inhost", base_env={}, path="/bin",
                  toolkit="5.1.1")
    assert planning.build(req, runtime=old).hosts[0].launcher == ["/bin/sh", "-c", "/py train.py --msg a b"]


# -- the real 5.1.1 runner ----------------------------------------------------------------------
SHOW = "import json, sys\nprint('ARGV ' + json.dumps(sys.argv[1:]))\n"
RUNNER = """\
import sys
from sagemaker_training import environment, process
environment.code_dir = sys.argv[1]
process.ProcessRunner("show.py", ["--msg", "a b"], {}, 1).run(wait=True, capture_error=True)
"""


@pytest.fixture(scope="module")
def toolkit_511(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("toolkit-5.1.1")
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                           "-d", str(folder), "sagemaker-training==5.1.1"], capture_output=True, text=True,
                          timeout=300)
    sdists = list(folder.glob("sagemaker_training-5.1.1.tar.gz"))
    if done.returncode != 0 or not sdists:
        pytest.skip(f"sagemaker-training 5.1.1 is not downloadable here: {done.stderr[-300:]}")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(folder, filter="data")
    return folder / "sagemaker_training-5.1.1" / "src"


@pytest.mark.parametrize("release", ["5.1.1", "installed"])
def test_prediction_matches_what_the_real_runner_started(release: str, toolkit_511: Path, tmp_path: Path) -> None:
    """What the script saw equals the predicted command, parsed as the predicted process would."""
    from importlib import metadata

    code = tmp_path / "code"
    code.mkdir()
    (code / "show.py").write_text(SHOW)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(toolkit_511) if release == "5.1.1" else ""}
    done = subprocess.run([sys.executable, "-c", RUNNER, str(code)], capture_output=True, text=True, env=env,
                          timeout=120)
    [seen] = marked_json(done.stdout, "ARGV ")
    version = "5.1.1" if release == "5.1.1" else metadata.version("sagemaker-training")
    predicted = tk.launcher_command("process", RC, _hps("show.py"), num_gpus=0, python=sys.executable,
                                    toolkit=version)
    assert predicted is not None
    argv = shlex.split(predicted[2]) if predicted[:2] == ["/bin/sh", "-c"] else predicted
    assert seen == argv[argv.index("show.py") + 1:]
    assert seen == (["--msg", "a", "b"] if release == "5.1.1" else ["--msg", "a b"])
