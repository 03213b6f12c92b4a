"""A job sees its DLC's packages: what SageMaker's most common scripts import works here as there,
and the emulator says truthfully why an import fails (process backend; the docker cases at the end).

Oracles: aws/deep-learning-containers (every PyTorch training DLC ships torchvision; the 2.13 GPU
DLC installs flash-attn, which does not install on a CPU: emulator/job/dlc_images.json and its
tests); torchvision's own ``MNIST`` dataset reading the processed files; torch's NCCL refusing a host
without GPUs (``init_process_group("nccl")`` on a CPU instance fails on SageMaker: its CPU DLCs have
no GPU, and NCCL needs one).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

import emulator
from emulator.job.result import JobResult

from ..rank_output import marked_json

SCRIPTS = Path(__file__).parents[1] / "scripts_dlc"
#: ``ModuleNotFoundError: No module named 'x'`` as the toolkit relays it (the line may arrive split).
MISSING = r"ModuleNotFoundError\s*:\s*No module named '{}'"


def mnist_data(root: Path, *, train: int = 96, test: int = 32) -> Path:
    """A ``training`` channel in torchvision's processed MNIST layout (``MNIST/processed/*.pt``):
    synthetic 28x28 images and labels; the scripts read them through ``datasets.MNIST``."""
    import torch

    gen = torch.Generator().manual_seed(0)
    folder = root / "MNIST" / "processed"
    folder.mkdir(parents=True)
    for name, count in (("training.pt", train), ("test.pt", test)):
        images = torch.randint(0, 256, (count, 28, 28), dtype=torch.uint8, generator=gen)
        torch.save((images, torch.randint(0, 10, (count,), generator=gen)), folder / name)
    return root


def run_mnist(tmp_path: Path, name: str, *, dist_backend: str, instance_type: str, **kwargs: object) -> JobResult:
    """``mnist_toolkit.py`` on 2 hosts with ``--backend dist_backend``; ``kwargs`` go to ``emulator.run``."""
    return emulator.run(entry_point="mnist_toolkit.py", source_dir=SCRIPTS, instance_count=2,
                        instance_type=instance_type, hyperparameters={"backend": dist_backend},
                        channels={"training": mnist_data(tmp_path / f"{name}-data")},
                        output_path=tmp_path / "out", job_name=name, echo=False, **kwargs)  # type: ignore[arg-type]


def mnist_reports(result: JobResult) -> list[dict[str, object]]:
    assert result.status == "Completed", (result.failure_reason, result.log("algo-1")[-3000:])
    reports = [r for host in ("algo-1", "algo-2") for r in marked_json(result.log(host), "MNIST ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], reports  # type: ignore[type-var]
    return reports


@pytest.mark.parametrize(("instance_type", "backend"), [("ml.c5.xlarge", "gloo"), ("ml.p3.8xlarge", "nccl")])
def test_the_toolkit_style_mnist_job_completes(tmp_path: Path, instance_type: str, backend: str) -> None:
    """torchvision's MNIST through the toolkit's environment, one process per host: on a CPU type
    with gloo, and on a GPU type with nccl (gloo on the emulated GPUs)."""
    reports = mnist_reports(run_mnist(tmp_path, f"mnist-{backend}", dist_backend=backend,
                                      instance_type=instance_type))
    for r in reports:
        assert r["hosts"] == 2 and r["backend"] == backend and r["samples"] == 48
        assert r["device"] == ("cuda" if backend == "nccl" else "cpu")
        assert str(r["torchvision"]).startswith("0.28.0")  # the 2.13 DLC's (AWS: torchvision==0.28.0)


def test_nccl_on_a_cpu_instance_fails_naming_nccl(tmp_path: Path) -> None:
    """The same script with ``backend=nccl`` on ml.c5.xlarge: no GPU, so NCCL refuses, as on SageMaker."""
    result = run_mnist(tmp_path, "mnist-nccl-cpu", dist_backend="nccl", instance_type="ml.c5.xlarge")
    assert result.status == "Failed"
    log = result.log("algo-1") + result.log("algo-2")
    assert re.search(r"NCCL", log), log[-3000:]


def test_a_dlc_module_the_emulator_cannot_install_is_named_as_its_gap(tmp_path: Path) -> None:
    """flash-attn is in the PyTorch 2.13 GPU DLC (aws/deep-learning-containers docker/pytorch/Dockerfile.cuda)
    but is CUDA-only: the preflight and the rank both say that SageMaker imports it and the emulator
    cannot (not the job's fault); the job fails here, at that import."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import torch\nimport flash_attn\n")
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=1, instance_type="ml.g5.xlarge",
                          framework_version="2.13", output_path=tmp_path / "out", job_name="dlc-gap", echo=False)
    assert result.status == "Failed"
    (warning,) = [w for w in result.warnings if "flash_attn" in w]
    assert "ships but the emulator cannot install here" in warning and "emulator's gap" in warning
    log = result.log("algo-1")
    assert re.search(MISSING.format("flash_attn"), log), log[-3000:]
    assert "the PyTorch 2.13.0 GPU DLC ships it, but the emulator cannot install it here" in log
    description = json.loads((result.job_dir / "job.json").read_text())
    assert "flash-attn" in description["Emulator"]["Framework"]["Image"]["NotInstalled"]


def _wheel(folder: Path, dist: str, module: str) -> Path:
    """A wheel of distribution ``dist`` whose only module is ``module`` (the import name is not the
    distribution's, as lightning-bolts provides pl_bolts)."""
    norm = dist.replace("-", "_")
    path = folder / f"{norm}-1.0-py3-none-any.whl"
    info = f"{norm}-1.0.dist-info"
    files = {f"{module}/__init__.py": "VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path


def test_a_requirement_provides_the_modules_its_wheel_installs(tmp_path: Path) -> None:
    """The import name of a requirement is read from what it installed (its ``RECORD``), not guessed
    from its name: a source dir that imports ``renamed_mod`` from the requirement
    ``sm-emulator-renamed`` gets no warning, and the job completes."""
    src = tmp_path / "src"
    src.mkdir()
    wheel = _wheel(src, "sm-emulator-renamed", "renamed_mod")
    (src / "requirements.txt").write_text(f"./{wheel.name}\n")
    (src / "train.py").write_text("import renamed_mod\nprint('VALUE', renamed_mod.VALUE)\n")
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=1, output_path=tmp_path / "out",
                          job_name="renamed", echo=False)
    assert result.status == "Completed", result.log("algo-1")[-3000:]
    assert not [w for w in result.warnings if "renamed_mod" in w], result.warnings
    assert re.search(r"VALUE\s+42", result.log("algo-1"))  # the toolkit relays print's chunks as lines


@pytest.mark.docker
def test_the_toolkit_style_mnist_job_completes_on_docker(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("docker_ready")
    reports = mnist_reports(run_mnist(tmp_path, "mnist-docker", dist_backend="gloo", instance_type="ml.c5.xlarge",
                                      backend="docker"))
    assert all(str(r["torchvision"]).startswith("0.28.0") for r in reports)
