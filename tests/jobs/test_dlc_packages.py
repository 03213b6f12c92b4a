"""A job's packages are its DLC's plus its requirements.txt: what the emulator says when a source
dir imports something the DLC lacks (process backend, real toolkit and torchrun).

No PyTorch training DLC ships Lightning or transformers (emulator/job/dlc_images.json, read from
aws/deep-learning-containers). A package nobody has stands for them here, so the job fails at the
import on this machine as it would on SageMaker.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

import emulator
from emulator.job.result import JobResult

#: The traceback's last line as the toolkit relays it: sagemaker_training/process.py ``watch()`` prints
#: each chunk it reads from the ranks as lines of their own, so the line may arrive split
#: (``ModuleNotFoundError`` / ``:`` / ``No module named …``), on SageMaker as here.
MISSING = r"ModuleNotFoundError\s*:\s*No module named '{}'"

DDP_SCRIPT = """\
import torch.distributed as dist
dist.init_process_group("gloo")
import sm_emulator_absent_pkg  # as `import lightning` without a requirements.txt on SageMaker
"""


def test_a_package_the_dlc_lacks_warns_before_start_and_fails_at_the_import(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(DDP_SCRIPT)
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                          job_name="dlc-lacks", instance_type="ml.g5.12xlarge", gpus_per_host=1, echo=False,
                          distribution={"torch_distributed": {"enabled": True}})
    assert result.status == "Failed"
    (warning,) = [w for w in result.warnings if "sm_emulator_absent_pkg" in w]
    assert "does not ship" in warning and "requirements.txt" in warning and "pip install" not in warning
    for host in ("algo-1", "algo-2"):
        log = result.log(host)
        assert re.search(MISSING.format("sm_emulator_absent_pkg"), log), log[-3000:]
        hints = {line[line.index("[emulator]"):] for line in log.splitlines()
                 if "[emulator] rank" in line and "does not ship it" in line}
        # one message per rank (one rank per host); the toolkit's error message may quote it again
        assert len(hints) == 1, log
        (hint,) = hints
        assert ("No module named 'sm_emulator_absent_pkg': the emulator's default world (the packages of the "
                "PyTorch 2.13.0 CPU DLC) does not ship it") in hint
        assert "requirements.txt" in hint


LIGHTNING_DDP = """\
import torch
import pytorch_lightning as pl


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4)), batch_size=4)
pl.Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", max_epochs=1, logger=False,
           enable_checkpointing=False, enable_progress_bar=False).fit(Tiny(), data)
"""


def _lightning_job(tmp_path: Path, name: str, requirements: str | None, backend: str = "process") -> JobResult:
    src = tmp_path / name
    src.mkdir()
    (src / "train.py").write_text(LIGHTNING_DDP)
    if requirements is not None:
        (src / "requirements.txt").write_text(requirements)
    return emulator.run(entry_point="train.py", source_dir=src, instance_count=2, output_path=tmp_path / f"{name}-out",
                        job_name=name, instance_type="ml.g5.12xlarge", gpus_per_host=1, echo=False,
                        distribution={"torch_distributed": {"enabled": True}}, backend=backend)


@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_lightning_installed_here_is_invisible_to_a_job_without_requirements(tmp_path: Path, backend: str,
                                                                              request: pytest.FixtureRequest) -> None:
    """No PyTorch DLC ships Lightning (see the module docstring): a Lightning DDP script without a
    requirements.txt dies at the import on SageMaker, so it does here although this machine's
    Python has Lightning (process backend) or on the emulator's image (docker backend); naming it
    in requirements.txt makes the same job complete."""
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    try:
        version = metadata.version("pytorch-lightning")  # pinned so pip can use the local wheel cache
    except metadata.PackageNotFoundError:
        pytest.skip("needs pytorch-lightning in this Python (the test is that jobs do not see it)")
    bare = _lightning_job(tmp_path, "lightning-bare", None, backend)
    assert bare.status == "Failed"
    for host in ("algo-1", "algo-2"):
        log = bare.log(host)
        assert re.search(MISSING.format("pytorch_lightning"), log), log[-3000:]
        assert any("[emulator] rank" in line and "No module named 'pytorch_lightning': the emulator's default world"
                   in line
                   and "requirements.txt" in line for line in log.splitlines()), log
    pins = "".join(f"{d}=={metadata.version(d)}\n" for d in ("torchmetrics", "lightning-utilities"))
    fixed = _lightning_job(tmp_path, "lightning-req", f"pytorch-lightning=={version}\n{pins}", backend)
    assert fixed.status == "Completed", fixed.log("algo-1")[-3000:]
