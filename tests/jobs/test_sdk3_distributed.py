"""SDK v3 distributed configs on 2 hosts x 2 emulated GPUs (process backend): each runs the SDK's own
driver (``torchrun_driver.py``, ``mpi_driver.py``, ``basic_script_driver.py`` or the command) as the
container command, and every rank reports where it ran and what it saw.

Expected rank layouts come from the SDK's driver code (reference ``sagemaker-sdk-v3.md`` §3): torchrun
starts ``process_count_per_node`` (else ``SM_NUM_GPUS``) ranks per host; mpirun starts what ``-np``
says, filling hosts in order; no config runs the script once per host.
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.sdk.versions import installed_major

from ..sdk3_support import emulator_session

if installed_major() != 3:
    pytest.skip("needs SageMaker Python SDK v3 (nox -s tests_sdk3)", allow_module_level=True)

pytestmark = pytest.mark.slow

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
REPORT = """\
import json, os, socket, sys
import torch
import torch.distributed as dist

def env(*names, default="0"):
    return int(next((os.environ[n] for n in names if n in os.environ), default))

rank, world = env("RANK", "OMPI_COMM_WORLD_RANK"), env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", default="1")
local = env("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
total = 1
if world > 1:
    os.environ.setdefault("MASTER_ADDR", "algo-1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(local)
    t = torch.ones(1).cuda()
    dist.all_reduce(t)
    total = int(t.item())
extra = ""
try:
    import sm_emulator_demo_pkg
    extra = sm_emulator_demo_pkg.VALUE
except ImportError:
    pass
print("REPORT " + json.dumps({"rank": rank, "world": world, "local": local, "host": socket.gethostname(),
      "sum": total, "argv": sys.argv[1:], "hps": json.loads(os.environ.get("SM_HPS", "{}")),
      "files": sorted(os.listdir(os.environ["SM_CHANNEL_TRAIN"])), "extra": extra}), flush=True)
if world > 1:
    dist.destroy_process_group()
"""
_REPORT = re.compile(r"REPORT (?=\{)")


def reports_in(text: str, marker: re.Pattern[str] = _REPORT) -> list[dict[str, Any]]:
    """Every JSON report after ``marker`` (ranks' lines may share a line when they print at once)."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(text, m.end())[0] for m in marker.finditer(text)]


def _wheel(folder: Path) -> str:
    """A pure-Python wheel built by hand (no network, no build backend): the requirement to install."""
    name = "sm_emulator_demo_pkg-0.1-py3-none-any.whl"
    info = "sm_emulator_demo_pkg-0.1.dist-info"
    files = {"sm_emulator_demo_pkg/__init__.py": 'VALUE = "installed from requirements"\n',
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: sm-emulator-demo-pkg\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / name, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
    return name


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdk3dist")
    for src in ("src", "src-req"):
        (root / src).mkdir()
        (root / src / "report.py").write_text(REPORT)
    (root / "src-req" / "requirements.txt").write_text(f"./{_wheel(root / 'src-req')}\n")
    (root / "data").mkdir()
    (root / "data" / "part-0.csv").write_text("1\n")
    return root


@pytest.fixture(scope="module")
def session(project: Path) -> Iterator[Any]:
    with emulator_session(project / "s3", gpus_per_host=2) as sess:
        yield sess


def _run(project: Path, session: Any, *, distributed: Any = None, src: str = "src", **source: Any) -> Any:
    from sagemaker.core.training.configs import Compute, InputData, SourceCode
    from sagemaker.train import ModelTrainer

    if "command" not in source:
        source.setdefault("entry_script", "report.py")
    trainer = ModelTrainer(
        training_image=IMAGE, role="SageMakerRole", distributed=distributed,
        source_code=SourceCode(source_dir=str(project / src), **source),
        compute=Compute(instance_type="ml.g5.12xlarge", instance_count=2),
        hyperparameters={"epochs": 1, "note": "two words"}, sagemaker_session=session)
    trainer.train(input_data_config=[InputData(channel_name="train", data_source=str(project / "data"))],
                  wait=True, logs=False)
    job = session.wait_for_emulated_job(trainer._latest_training_job.training_job_name)
    assert job.result.status == "Completed", job.result.failure_reason
    reports = []
    for host in job.result.hosts:
        reports += reports_in(host.log.read_text())
    return job.result, sorted(reports, key=lambda r: (r["rank"], r["host"]))


def _layout(reports: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    return [(r["rank"], r["host"], r["local"]) for r in reports]


def test_torchrun_with_process_count_per_node(project: Path, session: Any) -> None:
    from sagemaker.train.distributed import Torchrun

    result, reports = _run(project, session, distributed=Torchrun(process_count_per_node=1))
    assert _layout(reports) == [(0, "algo-1", 0), (1, "algo-2", 0)]
    assert all(r["world"] == 2 and r["sum"] == 2 for r in reports)
    assert all(r["argv"] == ["--epochs", "1", "--note", "two words"] for r in reports)
    assert not result.warnings


def test_mpi_with_additional_options_spans_both_hosts(project: Path, session: Any) -> None:
    from sagemaker.train.distributed import MPI

    # "-np 4" after the driver's own "-np 2": Open MPI takes the last, so both hosts get ranks
    result, reports = _run(project, session, distributed=MPI(process_count_per_node=2,
                                                             mpi_additional_options=["-np", "4", "-x", "NOTE=1"]))
    assert _layout(reports) == [(0, "algo-1", 0), (1, "algo-1", 1), (2, "algo-2", 0), (3, "algo-2", 1)]
    assert all(r["world"] == 4 and r["sum"] == 4 and r["files"] == ["part-0.csv"] for r in reports)
    assert all(r["hps"] == {"epochs": 1, "note": "two words"} for r in reports)
    assert not [w for w in result.warnings if "-np" in w]


def test_mpi_default_flags_the_rank_count_quirk(project: Path, session: Any) -> None:
    from sagemaker.train.distributed import MPI

    result, reports = _run(project, session, distributed=MPI(process_count_per_node=2))
    # the SDK's driver: --host algo-1:2,algo-2:2 -np 2 -> 2 ranks, both on algo-1 (as on SageMaker)
    assert _layout(reports) == [(0, "algo-1", 0), (1, "algo-1", 1)]
    (warning,) = [w for w in result.warnings if "-np" in w]
    assert "-np 2" in warning and "algo-2 ran no rank (idle)" in warning
    assert warning in result.description["Emulator"]["Warnings"]


def test_no_distributed_config_runs_the_script_once_per_host(project: Path, session: Any) -> None:
    _, reports = _run(project, session)
    assert _layout(reports) == [(0, "algo-1", 0), (0, "algo-2", 0)]
    assert all(r["world"] == 1 and r["argv"] == ["--epochs", "1", "--note", "two words"] for r in reports)


def test_source_code_command(project: Path, session: Any) -> None:
    _, reports = _run(project, session, command="python3 report.py --mode 'from command'")
    assert [r["host"] for r in reports] == ["algo-1", "algo-2"]
    assert all(r["argv"] == ["--mode", "from command"] for r in reports)  # hyperparameters only in SM_HPS
    assert all(r["hps"] == {"epochs": 1, "note": "two words"} for r in reports)


def test_source_code_requirements_install_into_the_job_environment(project: Path, session: Any) -> None:
    from sagemaker.train.distributed import Torchrun

    result, reports = _run(project, session, src="src-req", requirements="requirements.txt",
                           distributed=Torchrun())
    assert _layout(reports) == [(0, "algo-1", 0), (1, "algo-1", 1), (2, "algo-2", 0), (3, "algo-2", 1)]
    assert all(r["extra"] == "installed from requirements" for r in reports)
    log = result.hosts[0].log.read_text()
    assert "Installing requirements" in log and "sm_emulator_demo_pkg" in log
    with pytest.raises(ImportError):  # never installed into this environment
        __import__("sm_emulator_demo_pkg")
