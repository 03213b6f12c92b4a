"""The end of training as users write it (issue 55): the Hugging Face docs' FSDP fine-tuning path
(``Trainer(fsdp="full_shard auto_wrap")``, ``save_strategy="steps"`` checkpoints, ``save_model``,
``resume_from_checkpoint`` in a restarted job) on 2 hosts x 2 emulated GPUs, with the HF 4.56.2 DLC's transformers and
accelerate from the job's ``requirements.txt`` over the default world's torch.

``save_model`` under FSDP is a ``FULL_STATE_DICT`` gather with ``offload_to_cpu`` and ``rank0_only``
(accelerate's default) with ``use_orig_params=True``: it killed rank 0 with SIGSEGV here while it
saves on SageMaker (FSDP freed the unsharded parameter after a "move to the CPU" that is no copy on
a CPU; ``_sm_emulator_devices``). The training steps of each strategy are tested in
``test_fsdp_jobs.py`` (which also loads what DDP, FSDP v1 and FSDP2 save with ``torch.save``).

Oracle: ``transformers``' own ``from_pretrained`` in this test process (another release than the
job's, 5.x here) loads each saved model with no missing or unexpected key, and the loaded model's
logits on the script's fixed input equal the logits the job's FSDP model gave on every rank; the
checkpoint's full model (accelerate's ``pytorch_model_fsdp.bin``) equals the saved one; the resumed
trainer's log history carries the first run's losses for steps 1-4.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import torch

import emulator

SOURCE = Path(__file__).parents[1] / "scripts_hf"
WORLD = 4


def _logits(model: torch.nn.Module) -> torch.Tensor:
    """The script's probe (``logits`` in ``hf_fsdp_save.py``) through ``model``, on this process."""
    probe = torch.arange(16).reshape(2, 8) % 64
    model.eval()
    with torch.no_grad():
        return model(input_ids=probe, attention_mask=torch.ones_like(probe)).logits


def _run(output: Path, checkpoints: Path, backend: str) -> None:
    """One 2 x 2 job of the script; its model.tar.gz, extracted under ``output/model``."""
    result = emulator.run(entry_point="hf_fsdp_save.py", source_dir=SOURCE, output_path=output, job_name=output.name,
                          backend=backend,
                          instance_count=2, instance_type="ml.g5.12xlarge", gpus_per_host=2,
                          distribution={"torch_distributed": {"enabled": True}}, checkpoint_dir=checkpoints,
                          echo=False, stop_grace=2, profile="ci")
    assert result.status == "Completed", "\n".join(
        [str(result.failure_reason)] + [f"--- {h} ---\n{result.log_tail(h, 60)}" for h in ("algo-1", "algo-2")])
    assert result.model_artifact is not None
    with tarfile.open(result.model_artifact) as archive:
        archive.extractall(output / "model", filter="data")



def _saved(tmp_path: Path, name: str, job: str, steps: int) -> tuple[list[dict], torch.nn.Module]:
    """The job's reports and its saved model, loaded with transformers' ``from_pretrained`` (no key
    missing or unexpected), whose logits equal every rank's FSDP model's after ``steps`` steps."""
    transformers = pytest.importorskip("transformers")
    model_dir = tmp_path / job / "model"
    reports = [json.loads((model_dir / f"{name}-rank-{rank}.json").read_text()) for rank in range(WORLD)]
    model, info = transformers.BertForSequenceClassification.from_pretrained(model_dir / name,
                                                                            output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], (name, info)
    mine = _logits(model)
    for report in reports:
        assert report["step"] == steps, (name, report["rank"])
        torch.testing.assert_close(mine, torch.tensor(report["logits"]), rtol=1e-4, atol=1e-5,
                                   msg=f"{name}: the saved model's logits against rank {report['rank']}'s")
    return reports, model


def _checkpoint_holds(checkpoints: Path, steps: set[int], step: int, model: torch.nn.Module) -> None:
    """The checkpoints of ``steps`` (save_steps=2) reached the checkpoint location from the hosts,
    and step ``step``'s (accelerate's full-state-dict file of the checkpoint) holds ``model``."""
    assert {p.name for p in checkpoints.iterdir() if p.name.startswith("checkpoint-")} == \
        {f"checkpoint-{n}" for n in steps}
    at_step = torch.load(checkpoints / f"checkpoint-{step}" / "pytorch_model_fsdp.bin", weights_only=True)
    trained = model.state_dict()
    assert at_step and set(at_step) <= set(trained), sorted(at_step)
    for key, value in at_step.items():
        torch.testing.assert_close(value, trained[key], msg=f"checkpoint-{step} {key}")


def test_hf_trainer_fsdp_saves_checkpoints_and_resumes_on_2x2(tmp_path: Path) -> None:
    """Save, then a restarted job (SageMaker restores the checkpoints on every host) resumes."""
    pytest.importorskip("transformers")
    checkpoints = tmp_path / "checkpoints"
    _run(tmp_path / "hf-fsdp-save", checkpoints, "process")
    _run(tmp_path / "hf-fsdp-resume", checkpoints, "process")
    first_reports, trained = _saved(tmp_path, "trained", "hf-fsdp-save", 4)
    then_reports, resumed = _saved(tmp_path, "resumed", "hf-fsdp-resume", 6)
    # The resumed run trained on: another model than the one saved at step 4.
    assert not torch.allclose(_logits(trained), _logits(resumed), atol=1e-4)
    _checkpoint_holds(checkpoints, {2, 4, 6}, 4, trained)
    # Resumed from step 4: the first run's losses of steps 1-4 are in its history, then 5 and 6.
    first, then = first_reports[0]["losses"], then_reports[0]["losses"]
    assert sorted(first) == ["1", "2", "3", "4"] and sorted(then) == ["1", "2", "3", "4", "5", "6"]
    assert {k: then[k] for k in first} == first


@pytest.mark.docker
def test_hf_trainer_fsdp_saves_the_model_and_checkpoints_on_docker(tmp_path: Path, docker_ready: None) -> None:
    """The save on docker (the resume is the process backend's test: the same toolkit and files):
    accelerate imports DeepSpeed (the default image ships it), whose import asks for the CUDA
    toolkit a GPU DLC has (the emulated ``nvcc`` on ``PATH``)."""
    pytest.importorskip("transformers")
    checkpoints = tmp_path / "checkpoints"
    _run(tmp_path / "hf-fsdp-save", checkpoints, "docker")
    _reports, trained = _saved(tmp_path, "trained", "hf-fsdp-save", 4)
    _checkpoint_holds(checkpoints, {2, 4}, 4, trained)
