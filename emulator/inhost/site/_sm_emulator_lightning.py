"""Lightning patches (1.5 ``DDPPlugin``, 2.x ``DDPStrategy`` in ``lightning``/``pytorch_lightning``
and Fabric).

Everything else Lightning needs comes from the torch patches: ``accelerator="gpu"``/``gpus=N``
work because ``torch.cuda`` reports the emulated GPUs, ``nccl`` runs on gloo, ``smddp`` is the
stand-in backend. The one Lightning-specific change: DDP classes are told to use no CUDA device
ids (``determine_ddp_device_ids`` returns None), because with device ids Lightning wraps DDP in a
``torch.cuda.Stream`` and passes ``device_ids`` for a CPU model. The classes
and methods patched are the ``lightning-ddp`` entries of the patch registry
(``_sm_emulator_patches``): Lightning 2.6 (``pytorch_lightning``, ``lightning``, ``lightning_fabric``)
and 1.5.10 (``DDPPlugin``, ``DDPSpawnPlugin``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import _sm_emulator_patches as patches
from _sm_emulator_log import log_once


def _no_device_ids(original: Any) -> Any:
    @functools.wraps(original)
    def determine(self: Any, *args: Any, **kwargs: Any) -> None:
        ids = original(self, *args, **kwargs)
        if ids is not None:
            log_once(
                "lightning-ddp",
                f"Lightning {type(self).__name__}: CUDA device ids {ids} -> None (the model lives on the CPU)",
            )
        return None

    determine._sm_emulator = True  # type: ignore[attr-defined]
    return determine


def patch_ddp_module(module: ModuleType) -> None:
    """Patch the registered DDP device-id methods of ``module``'s classes (once)."""
    import _sm_emulator_cuda

    if _sm_emulator_cuda.gpu_count() == 0:
        return
    for entry in patches.entries("lightning-ddp", module.__name__):
        _owner, _name, method = patches.resolve(module, entry.attribute)
        if not getattr(method, "_sm_emulator", False):
            patches.wrap("lightning-ddp", module, entry.attribute, _no_device_ids)
