"""Lazy in-host patches, registered by ``sitecustomize`` when ``EMULATOR_INHOST=1``.

Only post-import hooks are registered here: torch is patched when ``import torch`` finishes,
Lightning's DDP strategies when their modules finish executing, the toolkit's MPI-family
runners and its training module when they do (``ci`` profile: short sleeps, no torch import in
the toolkit). A process that never imports torch or Lightning imports nothing beyond
``_sm_emulator_importhook``.
"""

from __future__ import annotations

from types import ModuleType

#: Lightning modules (2.x ``lightning``/``pytorch_lightning``/``lightning_fabric``, and 1.5's
#: ``plugins.training_type``) whose DDP classes pick CUDA device ids: the modules of the
#: ``lightning-ddp`` entries of ``_sm_emulator_patches`` (not imported here: it is not free, and
#: most processes never import Lightning; tests/test_patch_registry.py keeps the two equal).
LIGHTNING_DDP_MODULES = (
    "pytorch_lightning.strategies.ddp",
    "pytorch_lightning.plugins.training_type.ddp",
    "pytorch_lightning.plugins.training_type.ddp_spawn",
    "lightning.pytorch.strategies.ddp",
    "lightning.fabric.strategies.ddp",
    "lightning_fabric.strategies.ddp",
)
#: FSDP modules whose device choice is adjusted for emulated GPUs (registry: ``cuda-fsdp``; the
#: same tuple as ``_sm_emulator_devices.FSDP_MODULES``, which is not imported here).
FSDP_MODULES = ("torch.distributed.fsdp.fully_sharded_data_parallel", "torch.distributed.fsdp._init_utils",
                "torch.distributed.fsdp._fully_shard._fsdp_init")
#: The toolkit modules whose sleeps ``EMULATOR_SHORT_TOOLKIT_SLEEPS=1`` caps (registry: ``short-sleeps``).
TOOLKIT_SLEEP_MODULES = ("sagemaker_training.mpi", "sagemaker_training.smdataparallel")
#: The toolkit module whose torch import ``EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT=1`` avoids
#: (registry: ``toolkit-torch-version``).
TOOLKIT_TRAINING_MODULE = "sagemaker_pytorch_container.training"


def _on_torch(module: ModuleType) -> None:
    import _sm_emulator_torch

    _sm_emulator_torch.patch_torch(module)


def _on_lightning(module: ModuleType) -> None:
    import _sm_emulator_lightning

    _sm_emulator_lightning.patch_ddp_module(module)


def _on_fsdp(module: ModuleType) -> None:
    import _sm_emulator_devices

    _sm_emulator_devices.patch_fsdp_module(module)


def _on_toolkit_runner(module: ModuleType) -> None:
    import _sm_emulator_toolkit

    _sm_emulator_toolkit.patch(module)


def _on_toolkit_training(module: ModuleType) -> None:
    import _sm_emulator_toolkit

    _sm_emulator_toolkit.patch_training(module)


def _on_torch_collectives(module: ModuleType) -> None:  # debugging: collective records
    import _sm_emulator_collectives

    _sm_emulator_collectives.patch(module)


def install() -> None:
    """Register the lazy patches."""
    import os

    import _sm_emulator_exits
    import _sm_emulator_stacks
    from _sm_emulator_importhook import when_imported
    from _sm_emulator_names import ENV_SHORT_TOOLKIT_SLEEPS, ENV_TOOLKIT_SKIPS_TORCH_IMPORT

    _sm_emulator_stacks.install()  # debugging: stacks on request (emulator.diagnostics.stacks)
    _sm_emulator_exits.install()  # debugging: abnormal ends (emulator.diagnostics.quiet)
    when_imported("torch", _on_torch)
    when_imported("torch", _on_torch_collectives)
    if os.environ.get(ENV_SHORT_TOOLKIT_SLEEPS) == "1":
        for name in TOOLKIT_SLEEP_MODULES:
            when_imported(name, _on_toolkit_runner)
    if os.environ.get(ENV_TOOLKIT_SKIPS_TORCH_IMPORT) == "1":
        when_imported(TOOLKIT_TRAINING_MODULE, _on_toolkit_training)
    for name in LIGHTNING_DDP_MODULES:
        when_imported(name, _on_lightning)
    for name in FSDP_MODULES:
        when_imported(name, _on_fsdp)


__all__ = ["install"]
