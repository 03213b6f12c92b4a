"""FSDP end to end on 2 hosts x 2 emulated GPUs (nccl, torch_distributed, the real toolkit and
torchrun): torch.accelerator, FSDP v1 (``device_id=torch.cuda.current_device()``,
``sync_module_states``), FSDP2 (``fully_shard`` over ``init_device_mesh("cuda", ...)``), their
``torch.distributed.checkpoint`` checkpoints across two jobs, Lightning's ``FSDPStrategy`` and
DeepSpeed ZeRO-2/3 (with their checkpoints, resumed by a restarted job) run unchanged GPU code, and
train as DDP does.

Oracle: the same model, seed and global batches trained in this test process by plain single-process
SGD (AdamW for DeepSpeed) on the whole batch (no emulator, no distribution): data-parallel training
of equal slices with averaged gradients takes the same steps, so every rank's all-reduced mean loss
must match it to float tolerance, for each strategy (the scripts' constants are read from them).
"""

from __future__ import annotations

import ast
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import emulator
from emulator.job.result import JobResult

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: Lightning's scripts have a source dir of their own (the preflight asks every job whose source dir
#: imports Lightning for it).
LIGHTNING_SCRIPTS = Path(__file__).parents[1] / "scripts_lightning"
WORLD = 4


def _script_constants(script: Path, *names: str) -> dict[str, Any]:
    """The module-level constants ``names`` as ``script`` assigns them from literals (``A, B = 1, 2``
    or ``C = 3``): the test trains its reference with the script's own numbers."""
    found: dict[str, Any] = {}
    for node in ast.parse(script.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        target = node.targets[0]
        targets = target.elts if isinstance(target, ast.Tuple) else [target]
        try:
            values = ast.literal_eval(node.value)
        except ValueError:
            continue  # not a literal (``rank, world = dist.get_rank(), ...``)
        found.update(zip([getattr(t, "id", None) for t in targets],
                         values if isinstance(target, ast.Tuple) else [values]))
    missing = sorted(set(names) - set(found))
    assert not missing, f"constants not found in {script.name}: {missing}"
    return {name: found[name] for name in names}


def _constants() -> dict[str, Any]:
    """``STEPS, PER_RANK, LR`` and ``MOMENTUM`` as ``fsdp_train.py`` defines them."""
    return _script_constants(SCRIPTS / "fsdp_train.py", "STEPS", "PER_RANK", "LR", "MOMENTUM")


def _reference() -> tuple[list[float], torch.nn.Module, torch.optim.Optimizer]:
    """Single-process SGD on the whole global batch, as the script seeds it: the losses, and the
    model and optimizer after the last step."""
    c = _constants()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=c["LR"], momentum=c["MOMENTUM"])
    generator = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(int(c["STEPS"])):
        x = torch.randn(WORLD * int(c["PER_RANK"]), 8, generator=generator)
        y = torch.randn(WORLD * int(c["PER_RANK"]), 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model, optimizer


def _momentum_by_name(optimizer_state: dict, names: list[str]) -> dict[str, torch.Tensor]:
    """The momentum buffers of a saved optimizer state, by parameter name (``optimizer.state_dict()``
    keys them by index in parameter order; FSDP's and DCP's full optimizer state dicts by name)."""
    return {(names[key] if isinstance(key, int) else key): value["momentum_buffer"]
            for key, value in optimizer_state["state"].items()}


def _assert_saved_as_reference(saved: dict, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                               what: str) -> None:
    """A state saved by the job, loaded here with ``torch.load`` into a fresh model, equals the
    one-process reference: every parameter, and every momentum buffer of its optimizer."""
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fresh.load_state_dict(saved["model"])  # strict: the same names and shapes
    for name, value in fresh.state_dict().items():
        torch.testing.assert_close(value, model.state_dict()[name], rtol=1e-5, atol=1e-6, msg=f"{what} {name}")
    names = [name for name, _ in model.named_parameters()]
    expected = _momentum_by_name(optimizer.state_dict(), names)
    got = _momentum_by_name(saved["optimizer"], names)
    assert sorted(got) == sorted(expected), what
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6, msg=f"{what} momentum {name}")


def _run_2x2(output: Path, entry_point: str, source_dir: Path = SCRIPTS, **options: object) -> JobResult:
    return emulator.run(entry_point=entry_point, source_dir=source_dir, output_path=output, job_name=output.name,
                        instance_count=2, instance_type="ml.g5.12xlarge", gpus_per_host=2,
                        distribution={"torch_distributed": {"enabled": True}}, echo=False, stop_grace=2,
                        profile="ci", **options)


def _reports(result: JobResult, prefix: str) -> dict[int, dict]:
    assert result.status == "Completed", "\n".join(
        [str(result.failure_reason)] + [f"--- {h} ---\n{result.log_tail(h, 60)}" for h in ("algo-1", "algo-2")])
    reports = {int(r["rank"]): r for r in (json.loads(v) for k, v in result.model_files().items()
                                           if k.startswith(prefix))}
    assert sorted(reports) == list(range(WORLD))
    return reports


@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_fsdp_v1_and_fsdp2_train_as_ddp_on_2x2(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    result = _run_2x2(tmp_path / "fsdp", "fsdp_train.py", backend=backend)
    reports = _reports(result, "fsdp-rank-")
    expected, reference_model, reference_optimizer = _reference()
    for rank, r in reports.items():
        assert (r["accelerator"], r["accelerator_available"], r["accelerator_count"]) == ("cuda", True, 2)
        assert r["device_index"] == r["cuda_current"] == rank % 2
        assert r["device_module_is_cuda"] is True
        assert sorted(r["modes"]) == ["ddp", "fsdp1", "fsdp1-orig", "fsdp2"]
        for mode, seen in r["modes"].items():
            assert seen["losses"] == pytest.approx(expected, rel=1e-5, abs=1e-6), (rank, mode)
        fsdp2 = r["modes"]["fsdp2"]
        assert (fsdp2["mesh_device_type"], fsdp2["mesh_backend"]) == ("cuda", "gloo")
        assert (fsdp2["param_type"], fsdp2["param_mesh_device_type"], fsdp2["param_placements"]) == \
            ("DTensor", "cuda", ["Shard(dim=0)"])
        assert fsdp2["local_shard_rows"] == 16 // WORLD  # the first Linear's 16 rows, one slice per rank
    for mode in ("ddp", "fsdp1", "fsdp1-orig", "fsdp2"):  # the same on every rank, exactly (an all-reduced value)
        assert len({tuple(r["modes"][mode]["losses"]) for r in reports.values()}) == 1
    # What each strategy saved at the end of training (issue 55: FSDP v1's offload_to_cpu gather
    # crashed rank 0 with SIGSEGV, use_orig_params=True, or "storage of size 0" without).
    files = result.model_files()
    for mode in ("ddp", "fsdp1", "fsdp1-orig", "fsdp2"):
        saved = torch.load(io.BytesIO(files[f"saved-{mode}.pt"]), weights_only=True)
        _assert_saved_as_reference(saved, reference_model, reference_optimizer, mode)


def test_dcp_checkpoint_of_fsdp_v1_and_fsdp2_loads_on_the_next_run(tmp_path: Path) -> None:
    """A sharded checkpoint written through ``torch.distributed.checkpoint`` by one 2 x 2 job (each
    host writes its ranks' shards, algo-1 the metadata, all synced to ``checkpoint_dir``) loads in
    the next job into a model built from another seed: the gathered parameters are the first
    run's, for FSDP v1 (``ShardedStateDictConfig``) and FSDP2. Oracle for "the load did
    something": the seed-1 model's parameter sum, computed here without the emulator, differs."""
    checkpoints = tmp_path / "checkpoints"
    first = _reports(_run_2x2(tmp_path / "dcp-save", "fsdp_checkpoint.py", checkpoint_dir=checkpoints),
                     "checkpoint-rank-")
    saved = {name for name in (p.relative_to(checkpoints).as_posix() for p in checkpoints.rglob("*"))
             if name.endswith((".metadata", ".distcp"))}
    assert saved == {f"{mode}/{name}" for mode in ("fsdp1", "fsdp2")
                     for name in (".metadata", *(f"__{rank}_0.distcp" for rank in range(WORLD)))}
    second = _reports(_run_2x2(tmp_path / "dcp-load", "fsdp_checkpoint.py", checkpoint_dir=checkpoints),
                      "checkpoint-rank-")
    torch.manual_seed(1)
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fresh_sum = sum(p.detach().sum().item() for p in fresh.parameters())
    for mode in ("fsdp1", "fsdp2"):
        sums = {first[rank][mode]["sum"] for rank in range(WORLD)}
        assert len(sums) == 1, (mode, first)  # the gathered full parameters: one model on every rank
        assert [first[rank][mode]["resumed"] for rank in range(WORLD)] == [False] * WORLD
        assert [second[rank][mode]["resumed"] for rank in range(WORLD)] == [True] * WORLD
        for rank in range(WORLD):
            assert second[rank][mode]["sum"] == pytest.approx(first[0][mode]["sum"], rel=1e-6), (mode, rank)
        assert fresh_sum != pytest.approx(first[0][mode]["sum"], rel=1e-3)


def _lightning_reference(samples: int, per_rank: int, lr: float, momentum: float = 0.0,
                         epochs: int = 1) -> tuple[list[float], torch.nn.Module]:
    """One-process SGD over the Lightning scripts' dataset in blocks of world x per-rank samples
    (what their unshuffled ``DistributedSampler`` slices add up to, see
    ``tests/scripts_lightning/lightning_fsdp.py``): each step's loss, and the model after the last."""
    generator = torch.Generator().manual_seed(1234)
    x, y = torch.randn(samples, 8, generator=generator), torch.randn(samples, 4, generator=generator)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses = []
    block = WORLD * per_rank
    for _ in range(epochs):
        for start in range(0, samples, block):
            loss = torch.nn.functional.mse_loss(model(x[start:start + block]), y[start:start + block])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses, model


def test_lightning_fsdp_strategy_on_2x2(tmp_path: Path) -> None:
    """Lightning's ``FSDPStrategy`` on 4 emulated GPUs over 2 hosts. Oracle: single-process SGD
    over the same dataset in blocks of world x per-rank samples (what the script's unshuffled
    ``DistributedSampler`` slices add up to, see ``tests/scripts_lightning/lightning_fsdp.py``)."""
    pytest.importorskip("pytorch_lightning")
    result = _run_2x2(tmp_path / "lightning-fsdp", "lightning_fsdp.py", LIGHTNING_SCRIPTS)
    reports = _reports(result, "lightning-fsdp-rank-")
    samples, per_rank, lr = _script_constants(LIGHTNING_SCRIPTS / "lightning_fsdp.py",
                                              "SAMPLES", "PER_RANK", "LR").values()
    expected, model = _lightning_reference(samples, per_rank, lr)
    for rank, r in reports.items():
        assert (r["world_size"], r["strategy"], r["root_device"]) == (WORLD, "FSDPStrategy", f"cuda:{rank % 2}")
        assert r["losses"] == pytest.approx(expected, rel=1e-5, abs=1e-6), rank
    # trainer.save_checkpoint after fit (FSDP's full state dict gathered with offload_to_cpu, issue 55):
    # loaded here with torch.load, its weights are the one-process reference's after the last step.
    checkpoint = torch.load(io.BytesIO(result.model_files()["lightning-fsdp.ckpt"]), weights_only=False)
    saved = {name.removeprefix("net."): value for name, value in checkpoint["state_dict"].items()}
    assert sorted(saved) == sorted(model.state_dict())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(saved[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_lightning_ddp_checkpoint_resumes_with_ckpt_path_after_a_restart(tmp_path: Path) -> None:
    """Lightning's ``DDPStrategy`` with a ``ModelCheckpoint`` in /opt/ml/checkpoints, then the job
    restarted with the same checkpoint location: ``fit(ckpt_path=last.ckpt)`` on every rank (global
    rank 0 wrote it on algo-1; SageMaker restores it on every host) resumes at the saved epoch with
    SGD's momentum (issue 55). Oracle: one-process SGD with momentum over the same blocks (see
    ``test_lightning_fsdp_strategy_on_2x2``) for both runs' epochs; the final ``last.ckpt``, loaded
    here with ``torch.load``, holds its weights."""
    pytest.importorskip("pytorch_lightning")
    script = LIGHTNING_SCRIPTS / "lightning_resume.py"
    constants = _script_constants(script, "SAMPLES", "PER_RANK", "LR", "EPOCHS", "MOMENTUM")
    samples, per_rank, epochs = constants["SAMPLES"], constants["PER_RANK"], constants["EPOCHS"]
    expected, model = _lightning_reference(samples, per_rank, constants["LR"], constants["MOMENTUM"], 2 * epochs)
    half = len(expected) // 2

    checkpoints = tmp_path / "checkpoints"
    first = _reports(_run_2x2(tmp_path / "lightning-ddp", "lightning_resume.py", LIGHTNING_SCRIPTS,
                              checkpoint_dir=checkpoints), "lightning-resume-rank-")
    assert (checkpoints / "lightning-ddp" / "last.ckpt").is_file()
    second = _reports(_run_2x2(tmp_path / "lightning-ddp-resumed", "lightning_resume.py", LIGHTNING_SCRIPTS,
                               checkpoint_dir=checkpoints), "lightning-resume-rank-")
    for rank in range(WORLD):
        assert (first[rank]["strategy"], first[rank]["root_device"]) == ("DDPStrategy", f"cuda:{rank % 2}")
        assert (first[rank]["resumed"], first[rank]["started_at_epoch"]) == (False, 0)
        assert (second[rank]["resumed"], second[rank]["started_at_epoch"]) == (True, epochs)
        assert first[rank]["losses"] == pytest.approx(expected[:half], rel=1e-5, abs=1e-6), rank
        assert second[rank]["losses"] == pytest.approx(expected[half:], rel=1e-5, abs=1e-6), rank
    saved = torch.load(checkpoints / "lightning-ddp" / "last.ckpt", weights_only=False)
    assert saved["global_step"] == len(expected)  # the optimizer steps of both runs
    weights = {name.removeprefix("net."): value for name, value in saved["state_dict"].items()}
    assert sorted(weights) == sorted(model.state_dict())
    for name, value in model.state_dict().items():
        torch.testing.assert_close(weights[name], value, rtol=1e-5, atol=1e-6, msg=name)


def _deepspeed_job(tmp_path: Path, name: str, checkpoints: Path) -> JobResult:
    return emulator.run(entry_point="deepspeed_zero.py", source_dir=SCRIPTS.parent / "scripts_deepspeed",
                        output_path=tmp_path / name, job_name=name, instance_count=2, instance_type="ml.g5.12xlarge",
                        gpus_per_host=2, distribution={"torch_distributed": {"enabled": True}},
                        checkpoint_dir=checkpoints, echo=False, stop_grace=2, profile="ci")


def test_deepspeed_zero2_and_zero3_train_save_and_resume_on_2x2(tmp_path: Path) -> None:
    """DeepSpeed ZeRO-2 and ZeRO-3 (0.19.8 from the job's ``requirements.txt``, over the 0.19.2 the
    2.13 DLC ships: emulator/job/dlc_images.json) with torch's AdamW on 4 emulated GPUs over 2 hosts:
    train, ``save_checkpoint`` to each host's /opt/ml/checkpoints (node-local storage), then a
    restarted job ``load_checkpoint``s from what SageMaker restores there and trains on, and runs
    DeepSpeed's own ``zero_to_fp32.py`` (issue 55).

    Oracles: single-process AdamW on the whole global batch (``tests/scripts_deepspeed``) for the
    losses of both runs (the resumed steps match only if the weights and Adam's moments were
    restored); the consolidated fp32 state dict, loaded here with ``torch.load``, equals the
    reference model after the first run's steps."""
    source = SCRIPTS.parent / "scripts_deepspeed"
    steps, per_rank, lr, more = _script_constants(source / "deepspeed_zero.py",
                                                  "STEPS", "PER_RANK", "LR", "MORE").values()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(1234)
    expected, saved_state = [], {}
    for step in range(steps + more):
        if step == steps:
            saved_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        x = torch.randn(WORLD * per_rank, 8, generator=generator)
        y = torch.randn(WORLD * per_rank, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        expected.append(loss.item())

    checkpoints = tmp_path / "checkpoints"
    reports = _reports(_deepspeed_job(tmp_path, "deepspeed", checkpoints), "deepspeed-rank-")
    for rank, r in reports.items():
        assert r["accelerator"] == "cuda"
        for stage in ("2", "3"):
            seen = r["stages"][stage]
            assert (seen["device"], seen["zero_stage"]) == (f"cuda:{rank % 2}", int(stage))
            assert seen["losses"] == pytest.approx(expected[:steps], rel=1e-5, abs=1e-6), (rank, stage)
    # Every host uploaded its shards to the one checkpoint location: all 4 ranks' optimizer states.
    for stage in ("2", "3"):
        shards = sorted(p.name for p in (checkpoints / f"zero{stage}" / "final").glob("*optim_states.pt"))
        assert len(shards) == WORLD, (stage, shards)

    resumed_job = _deepspeed_job(tmp_path, "deepspeed-resumed", checkpoints)
    resumed = _reports(resumed_job, "deepspeed-resumed-")
    for rank, r in resumed.items():
        assert r["resumed"] is True
        for stage in ("2", "3"):
            seen = r["stages"][stage]
            assert (seen["loaded"], seen["zero_stage"]) == (True, int(stage))
            assert seen["losses"] == pytest.approx(expected[steps:], rel=1e-5, abs=1e-6), (rank, stage)
    files = resumed_job.model_files()
    for stage in ("2", "3"):
        consolidated = torch.load(io.BytesIO(files[f"zero{stage}-fp32/pytorch_model.bin"]), weights_only=True)
        assert sorted(consolidated) == sorted(saved_state), stage
        for name, value in saved_state.items():
            torch.testing.assert_close(consolidated[name], value, rtol=1e-5, atol=1e-6, msg=f"zero{stage} {name}")
