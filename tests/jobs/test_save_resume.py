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



@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_hf_trainer_fsdp_saves_checkpoints_and_resumes_on_2x2(tmp_path: Path, backend: str,
                                                               request: pytest.FixtureRequest) -> None:
    """On docker too: accelerate imports DeepSpeed (the default image ships it), whose import asks
    for the CUDA toolkit a GPU DLC has (the emulated ``nvcc`` on ``PATH``)."""
    transformers = pytest.importorskip("transformers")
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    checkpoints = tmp_path / "checkpoints"
    _run(tmp_path / "hf-fsdp-save", checkpoints, backend)
    # Checkpoints (save_steps=2) reached the checkpoint location from the hosts.
    assert {p.name for p in checkpoints.iterdir() if p.name.startswith("checkpoint-")} == \
        {"checkpoint-2", "checkpoint-4"}
    # Restarted: SageMaker restores the checkpoints on every host.
    _run(tmp_path / "hf-fsdp-resume", checkpoints, backend)
    reports, loaded = {}, {}
    for name, job, steps in (("trained", "hf-fsdp-save", 4), ("resumed", "hf-fsdp-resume", 6)):
        model_dir = tmp_path / job / "model"
        reports[name] = [json.loads((model_dir / f"{name}-rank-{rank}.json").read_text()) for rank in range(WORLD)]
        model, info = transformers.BertForSequenceClassification.from_pretrained(
            model_dir / name, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], (name, info)
        loaded[name] = model
        mine = _logits(model)
        for report in reports[name]:
            assert report["step"] == steps, (name, report["rank"])
            torch.testing.assert_close(mine, torch.tensor(report["logits"]), rtol=1e-4, atol=1e-5,
                                       msg=f"{name}: the saved model's logits against rank {report['rank']}'s")
    # The resumed run trained on: another model than the one saved at step 4.
    assert not torch.allclose(_logits(loaded["trained"]), _logits(loaded["resumed"]), atol=1e-4)
    # Step 4's checkpoint holds the saved model (accelerate's full-state-dict file of the checkpoint).
    at_4 = torch.load(checkpoints / "checkpoint-4" / "pytorch_model_fsdp.bin", weights_only=True)
    trained = loaded["trained"].state_dict()
    assert at_4 and set(at_4) <= set(trained), sorted(at_4)
    for key, value in at_4.items():
        torch.testing.assert_close(value, trained[key], msg=f"checkpoint-4 {key}")
    # Resumed from step 4: the first run's losses of steps 1-4 are in its history, then 5 and 6.
    first, then = reports["trained"][0]["losses"], reports["resumed"][0]["losses"]
    assert sorted(first) == ["1", "2", "3", "4"] and sorted(then) == ["1", "2", "3", "4", "5", "6"]
    assert {k: then[k] for k in first} == first
