"""A job's packages are its DLC's plus its requirements.txt: what the emulator says when a source
dir imports something the DLC lacks (process backend, real toolkit and torchrun).

No PyTorch training DLC ships Lightning or transformers (aws/deep-learning-containers:
``pytorch/training/docker/1.12/py3/cu116/Dockerfile.gpu``, the ``core_packages.json`` files of
1.13, 2.2 and 2.5, ``docker/pytorch/2.13/cpu/pyproject.toml``). A package nobody has stands for
them here, so the job fails at the import on this machine as it would on SageMaker.
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
        assert "No module named 'sm_emulator_absent_pkg': the PyTorch DLC" in hint
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
        assert any("[emulator] rank" in line and "No module named 'pytorch_lightning': the PyTorch DLC" in line
                   and "requirements.txt" in line for line in log.splitlines()), log
    pins = "".join(f"{d}=={metadata.version(d)}\n" for d in ("torchmetrics", "lightning-utilities"))
    fixed = _lightning_job(tmp_path, "lightning-req", f"pytorch-lightning=={version}\n{pins}", backend)
    assert fixed.status == "Completed", fixed.log("algo-1")[-3000:]


def test_the_dlc_view_holds_the_dlc_list_and_its_requirements_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """What a process-backend job may import of this machine's packages: the DLC's list, what hosts
    need and their requirements, read from the installed metadata; nothing the DLC lacks."""
    from emulator.backends import dlcview
    from emulator.job import frameworks

    monkeypatch.setattr(dlcview, "VIEWS", tmp_path / "views")
    view = dlcview.ensure(None)
    names = {p.name for p in view.iterdir()}
    for module in ("torch", "sagemaker_training", "mpi4py", "pip"):
        assert module in names or f"{module}.py" in names, sorted(names)
    for absent in ("pytorch_lightning", "lightning_fabric", "transformers", "pytest", "moto", "emulator"):
        assert absent not in names, absent
    installed = {d.metadata["Name"].lower(): d for d in metadata.distributions()}
    if "requests" in installed:  # a requirement of sagemaker-training, so in the view with its own
        assert "urllib3" in names and "requests" in names
    other = next(f for f in frameworks.FAMILIES if f.torch.split("+")[0] != metadata.version("torch").split("+")[0])
    assert "torch" not in {dlcview.canonical(d.metadata["Name"]) for d in dlcview.closure(other)}
    assert dlcview.ensure(None) == view and (view / ".ready").is_file()  # cached


def test_a_legacy_egg_info_install_enters_the_view_by_its_installed_files(tmp_path: Path) -> None:
    """pip without ``wheel`` installs an sdist with ``setup.py install``: an ``.egg-info`` folder whose
    ``files`` Python 3.11 reads from SOURCES.txt (source paths). The view takes installed-files.txt."""
    from emulator.backends import dlcview

    site = tmp_path / "site-packages"
    (site / "pkgx").mkdir(parents=True)
    (site / "pkgx" / "__init__.py").write_text("")
    (site / "pkgx_ext.so").write_text("")
    egg = site / "pkgx-1.0-py3.11.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: pkgx\nVersion: 1.0\n")
    (egg / "SOURCES.txt").write_text("README.md\nsrc/pkgx/__init__.py\n")
    (egg / "top_level.txt").write_text("pkgx\npkgx_ext\n")
    (egg / "installed-files.txt").write_text("../pkgx/__init__.py\n../pkgx_ext.so\n../../../../bin/pkgx\nPKG-INFO\n")
    base, tops, _ = dlcview._entries(metadata.PathDistribution(egg))
    assert base == site
    assert tops == {"pkgx", "pkgx_ext.so", egg.name}
