"""A job's packages are its DLC's plus its requirements.txt: what the emulator says when a source
dir imports something the DLC lacks (process backend, real toolkit and torchrun).

No PyTorch training DLC ships Lightning or transformers (aws/deep-learning-containers:
``pytorch/training/docker/1.12/py3/cu116/Dockerfile.gpu``, the ``core_packages.json`` files of
1.13, 2.2 and 2.5, ``docker/pytorch/2.13/cpu/pyproject.toml``). A package nobody has stands for
them here, so the job fails at the import on this machine as it would on SageMaker.
"""

from __future__ import annotations

from pathlib import Path

import emulator

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
        assert "ModuleNotFoundError: No module named 'sm_emulator_absent_pkg'" in log
        hints = {line[line.index("[emulator]"):] for line in log.splitlines()
                 if "[emulator] rank" in line and "does not ship it" in line}
        # one message per rank (one rank per host); the toolkit's error message may quote it again
        assert len(hints) == 1, log
        (hint,) = hints
        assert "No module named 'sm_emulator_absent_pkg': the PyTorch DLC" in hint
        assert "requirements.txt" in hint
