"""torch patches applied right after ``import torch`` finishes (never earlier).

- CUDA on the CPU: see ``_sm_emulator_cuda``, ``_sm_emulator_streams`` and ``_sm_emulator_devices``
  (only when ``EMULATOR_GPU_COUNT`` > 0; applied in order by :func:`_patch_cuda`).
- ``init_process_group("nccl")`` (also ``"cuda:nccl,cpu:gloo"`` forms) runs on gloo when the host
  has emulated GPUs; with 0 GPUs nothing is translated and torch fails as on a CPU instance.
  ``device_id=cuda:i`` and ``barrier(device_ids=...)`` are dropped for gloo groups.
- A default group created that way, or for ``"smddp"``, is destroyed at exit when the script did
  not destroy it, with torch's NCCL warning (``_sm_emulator_teardown``: gloo's own teardown at
  interpreter exit can abort).
- ``"smddp"`` is *not* translated here: as on SageMaker, it exists once
  ``smdistributed.dataparallel.torch.torch_smddp`` has been imported (our stand-in registers it).
- Rank diagnostics (``EMULATOR_DIAG_DIR``): process-group and ``DistributedSampler`` records, and
  the rendezvous report each ``init_process_group`` writes before it blocks (``_sm_emulator_rendezvous``).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import _sm_emulator_cuda
import _sm_emulator_diag
import _sm_emulator_patches as patches
import _sm_emulator_rendezvous
import _sm_emulator_teardown
from _sm_emulator_log import log_once


def translate_backend(backend: Any) -> Any:
    """``backend`` with NCCL replaced by gloo (CUDA devices are CPU processes here)."""
    if backend is None:
        return None
    text = str(backend)
    if "nccl" not in text.lower():
        return backend
    if ":" not in text:
        return "gloo"
    parts = []
    for part in text.split(","):
        device, _, name = part.partition(":")
        parts.append(f"{device}:{'gloo' if name.strip().lower() == 'nccl' else name}")
    return ",".join(dict.fromkeys(parts))


def _backend_registered(dist: Any, name: str) -> bool:
    """Whether a third-party backend is registered: ``Backend._plugins`` from torch 2.0, a
    ``Backend.<NAME>`` attribute before (torch 1.12/1.13 ``register_backend``)."""
    plugins = getattr(dist.Backend, "_plugins", None)
    if plugins is not None:
        return name.upper() in plugins
    return hasattr(dist.Backend, name.upper())


def _patch_distributed(torch: Any) -> None:
    dist = torch.distributed
    if not dist.is_available() or getattr(dist, "_sm_emulator_patched", False):
        return
    dist._sm_emulator_patched = True
    c10d = dist.distributed_c10d
    emulate_gpus = _sm_emulator_cuda.gpu_count() > 0

    def adjust_init(arguments: dict[str, Any]) -> Any:
        requested = arguments.get("backend")
        joined = _sm_emulator_rendezvous.report(arguments)  # before the rendezvous blocks
        if emulate_gpus:
            backend = translate_backend(requested)
            if backend != requested:
                arguments["backend"] = backend
                log_once("backend", f"process group backend {requested!r} runs on gloo (GPUs are emulated)")
            device_id = arguments.get("device_id")
            if device_id is not None and _sm_emulator_cuda.map_device(device_id) == "cpu":
                arguments["device_id"] = None
        if str(requested).lower() == "smddp" and not _backend_registered(dist, "smddp"):
            log_once(
                "smddp-missing",
                "backend 'smddp' is registered by `import "
                "smdistributed.dataparallel.torch.torch_smddp` (as on SageMaker)",
            )
        asked = _sm_emulator_teardown.translated(requested, arguments.get("backend"))

        def after(result: Any) -> None:
            joined(result)
            _sm_emulator_diag.record_process_group(dist, requested)
            if asked is not None:
                _sm_emulator_teardown.track(dist, asked, _sm_emulator_cuda.gpu_count())

        return after

    def adjust_barrier(arguments: dict[str, Any]) -> None:
        device_ids = arguments.get("device_ids")
        if device_ids is not None and emulate_gpus and c10d.get_backend(arguments.get("group")) == "gloo":
            log_once("barrier", f"barrier(device_ids={device_ids!r}) on gloo: device_ids dropped")
            arguments["device_ids"] = None

    patches.wrap("gloo-backend", c10d, "init_process_group", lambda original: patches.rebinding(original, adjust_init))
    patches.wrap("gloo-backend", c10d, "barrier", lambda original: patches.rebinding(original, adjust_barrier))


def _patch_sampler(torch: Any) -> None:
    if not _sm_emulator_diag.enabled():
        return

    def make_init(original_init: Any) -> Any:
        @functools.wraps(original_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            _sm_emulator_diag.record_sampler(self, torch.distributed)

        return __init__

    patches.wrap("diagnostics", torch.utils.data.distributed, "DistributedSampler.__init__", make_init)


def _patch_cuda(torch: Any) -> None:
    """CUDA on the CPU (once, only when ``EMULATOR_GPU_COUNT`` > 0), in this order: ``torch.cuda``
    itself, its streams, events and NVTX (``_sm_emulator_streams``), the ``torch._C`` accelerator
    hooks (``_sm_emulator_devices``), then tensors, factories and DDP. This module owns the order;
    those modules import each other only downwards (devices -> streams -> cuda)."""
    if getattr(torch, "_sm_emulator_cuda", False) or _sm_emulator_cuda.gpu_count() == 0:
        return
    torch._sm_emulator_cuda = True
    _sm_emulator_cuda.patch_torch_cuda(torch)
    import _sm_emulator_streams

    _sm_emulator_streams.patch(torch)
    import _sm_emulator_devices

    _sm_emulator_devices.patch_accelerator(torch)
    _sm_emulator_cuda.patch_tensors(torch)
    import _sm_emulator_memory

    _sm_emulator_memory.install(torch)


def patch_torch(torch: ModuleType) -> None:
    """Called once ``torch`` has finished importing."""
    _patch_cuda(torch)
    _patch_distributed(torch)
    _patch_sampler(torch)
