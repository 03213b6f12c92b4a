"""Lazy in-host patches, registered by ``sitecustomize`` when ``EMULATOR_INHOST=1``.

Only post-import hooks are registered here: torch is patched when ``import torch`` finishes,
Lightning's DDP strategies when their modules finish executing, the toolkit's MPI-family
runners and its training module when they do (``ci`` profile: short sleeps, no torch import in
the toolkit). A process that never imports torch or Lightning imports no patch module: only
``_sm_emulator_importhook``, ``_sm_emulator_names`` and the two debugging recorders
(``_sm_emulator_stacks``, ``_sm_emulator_exits``).

Import direction: this module is the top of the in-host code's imports (in a host, only ``sitecustomize``
imports it); the modules it registers never import it back.
"""

from __future__ import annotations

from types import ModuleType

# The modules watched below, one tuple per patch registry group (``_sm_emulator_patches``; not
# imported here: it is not free, and most processes never import torch or Lightning;
# tests/jobs/test_patch_registry.py keeps each equal to its group's modules). They live in
# ``_sm_emulator_names`` (already imported by ``sitecustomize``) because the patch modules read
# them too (``_sm_emulator_devices``: ``FSDP_MODULES``), and a patch module never imports this
# one, which imports them. Re-exported here as ``_sm_emulator_hooks.<NAME>``.
try:  # in a host, the names module is top-level; in the emulator (tests), a sibling in the package
    from _sm_emulator_names import FSDP_MODULES, LIGHTNING_DDP_MODULES, TOOLKIT_SLEEP_MODULES, TOOLKIT_TRAINING_MODULE
except ImportError:
    from ._sm_emulator_names import FSDP_MODULES, LIGHTNING_DDP_MODULES, TOOLKIT_SLEEP_MODULES, TOOLKIT_TRAINING_MODULE


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


__all__ = ["FSDP_MODULES", "LIGHTNING_DDP_MODULES", "TOOLKIT_SLEEP_MODULES", "TOOLKIT_TRAINING_MODULE", "install"]
