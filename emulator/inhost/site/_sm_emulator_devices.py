"""Emulated GPUs through torch's device-generic APIs: ``torch.accelerator`` and FSDP's device choice.

Applied when ``EMULATOR_GPU_COUNT`` > 0: the accelerator hooks right after ``import torch``
(by ``_sm_emulator_torch``, after the streams), the FSDP ones when FSDP's modules finish importing.

Emulated:

- ``torch.accelerator``: torch's own Python module runs unchanged over the ``torch._C`` hooks it
  calls, replaced here: ``current_accelerator()`` is ``cuda``; ``is_available``/``device_count``
  are ``torch.cuda``'s (emulated); ``current_device_index``/``set_device_index``/``device_index(i)``
  track the same current device as ``torch.cuda.set_device``; ``current_stream``/``set_stream`` are
  the emulated CUDA streams (``_sm_emulator_streams``); ``synchronize`` returns at once;
  ``get_device_capability`` lists every torch dtype; ``get_memory_info`` is ``mem_get_info``'s
  (the instance type's GPU memory, all free); the allocator reports itself uninitialised, so
  ``memory_stats`` is empty and ``memory_allocated`` etc. are 0, as in ``torch.cuda``.
  ``torch.get_device_module("cuda")`` is ``torch.cuda`` (unpatched: it looks the module up by name).
- FSDP (v1): ``FullyShardedDataParallel(..., device_id=<cuda index or device>)`` or without a
  ``device_id``: the compute device is the CPU (where the "GPU" tensors are), after the index is
  checked as CUDA would; ``sync_module_states=True`` accepts the (CPU) tensors of the emulated GPUs
  (so a module never moved to the GPU is not refused here as it is on one); everything else
  (sharding, the broadcast of ``sync_module_states``, state dicts) is FSDP's own code on the CPU,
  over the gloo groups that stand in for nccl; its device handle is the emulated ``torch.cuda``
  (streams, events, ``synchronize``), as on a GPU. Moving an unsharded flat parameter to the CPU
  (``offload_to_cpu=True`` state dicts, ``summon_full_params``) copies it, as the GPU-to-host copy
  does; FSDP then frees the "GPU" copy (on a CPU the move is a no-op, and the free would take the
  parameter's memory: a SIGSEGV in the full state dict's gather).
- FSDP2 (``fully_shard``) over ``init_device_mesh("cuda", ...)``: the mesh keeps device type
  ``cuda`` (as scripts see it), its groups are gloo; FSDP2 computes on the CPU device.

Not emulated: ``torch.device(<int>)`` (torch resolves a bare index to the accelerator in C++, which
has none: "Cannot access accelerator device when none is available"; write ``torch.device("cuda",
i)``); ``torch._C._get_accelerator()`` and so ``torch.get_device_module()`` with no argument stay
``cpu`` (``init_process_group()`` without a backend reads it and would otherwise pick nccl only);
``torch.accelerator.Graph``; C++ code asking for the accelerator.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import _sm_emulator_cuda as cuda_emu
import _sm_emulator_patches as patches
from _sm_emulator_log import log_once
from _sm_emulator_names import FSDP_MODULES  # the modules of the ``cuda-fsdp`` registry entries


def patch_accelerator(torch: Any) -> None:
    """Replace the ``torch._C`` accelerator hooks (see the module docstring)."""
    import _sm_emulator_streams as streams

    C = torch._C
    dtypes = frozenset(v for v in vars(torch).values() if isinstance(v, torch.dtype))

    def get_accelerator() -> Any:
        return torch.device("cuda")

    def get_index() -> int:
        return int(cuda_emu._State.current)

    def set_index(index: int) -> None:
        if index >= 0:
            cuda_emu._set_device(int(index))

    def exchange(index: int) -> int:
        previous = get_index()
        set_index(index)
        return previous

    def get_stream(index: int) -> Any:
        return streams.current_stream(int(index))

    def synchronize(index: int) -> None:
        cuda_emu._check(int(index)) if index >= 0 else None

    def capability(index: int) -> dict[str, Any]:
        cuda_emu._check(int(index))
        return {"supported_dtypes": set(dtypes)}

    def memory_info(index: int) -> tuple[int, int]:
        return tuple(torch.cuda.mem_get_info(int(index)))  # type: ignore[return-value]

    def nothing() -> None:
        return None

    replacements = {
        "_accelerator_getAccelerator": get_accelerator,
        "_accelerator_getDeviceIndex": get_index,
        "_accelerator_setDeviceIndex": set_index,
        "_accelerator_exchangeDevice": exchange,
        "_accelerator_maybeExchangeDevice": exchange,
        "_accelerator_getStream": get_stream,
        "_accelerator_setStream": streams.set_stream,
        "_accelerator_synchronizeDevice": synchronize,
        "_accelerator_getDeviceCapability": capability,
        "_accelerator_isAllocatorInitialized": lambda: False,
        "_accelerator_getMemoryInfo": memory_info,
        "_accelerator_emptyHostCache": nothing,
    }
    for name, value in replacements.items():
        patches.replace("cuda-accelerator", C, name, value)


def _cpu_for_cuda(device: Any, what: str) -> Any:
    """``torch.device("cpu")`` for a CUDA device (index checked) or None; else ``device``."""
    import torch

    if device is None or cuda_emu._index(device) is not None:
        if device is not None:
            cuda_emu.map_device(device)
        log_once("fsdp-device", f"{what}: FSDP computes on the CPU (emulated GPU {cuda_emu._State.current})")
        return torch.device("cpu")
    return device


def _copying_flat_param_to(original: Any) -> Any:
    """``FlatParamHandle.flat_param_to`` that copies when it moves a flat parameter of the emulated
    GPU (a CPU tensor) to the CPU, as the GPU-to-host copy it stands for does.

    FSDP's ``FlatParamHandle.to_cpu`` (the ``offload_to_cpu=True`` of ``FullStateDictConfig`` and
    ``summon_full_params``: accelerate's and so HF Trainer's FSDP ``save_model``) moves the unsharded
    flat parameter to the CPU, then frees the unsharded storage on the compute device. On a GPU the
    move is a copy; on a CPU the move is a no-op, so the free (``storage.resize_(0)``) takes the
    parameter's own memory and the state dict reads freed memory: SIGSEGV with ``use_orig_params``,
    "setStorage: ... out of bounds for storage of size 0" without (plain torch with
    ``device_id="cpu"`` does the same). FSDP's other calls move to the compute device only when the
    parameter is elsewhere (CPU offload), which never happens when both are the CPU."""
    import torch

    @functools.wraps(original)
    def flat_param_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("device")
        on_cpu = self.flat_param.device.type == "cpu" and getattr(self, "device", None) == torch.device("cpu")
        if on_cpu and target is not None and torch.device(target).type == "cpu" and not kwargs.get("copy"):
            log_once("fsdp-to-cpu", "FSDP moves an unsharded parameter from the emulated GPU to the CPU: copied")
            kwargs["copy"] = True
        return original(self, *args, **kwargs)

    return flat_param_to


def patch_fsdp_module(module: ModuleType) -> None:
    """Adjust FSDP's device choice in ``module`` (one of :data:`FSDP_MODULES`), once."""
    if cuda_emu.gpu_count() == 0 or getattr(module, "_sm_emulator_fsdp", False):
        return
    module._sm_emulator_fsdp = True  # type: ignore[attr-defined]
    if module.__name__ == FSDP_MODULES[0]:
        def adjust_v1(arguments: dict[str, Any]) -> Any:
            device_id = arguments.get("device_id")
            arguments["device_id"] = _cpu_for_cuda(device_id, f"FullyShardedDataParallel(device_id={device_id!r})")
            fsdp = arguments["self"]

            def cuda_handle(_result: Any) -> None:
                """FSDP's streams, events and synchronisation go through (emulated) ``torch.cuda``, as
                on a GPU; ``torch.cpu``'s stand-ins lack some (``Stream.synchronize``)."""
                import torch

                handle = getattr(fsdp, "_device_handle", None)
                if getattr(handle, "_FSDPDeviceHandle__device", None) == torch.device("cpu"):  # torch.cpu behind it
                    fsdp._device_handle = torch.cuda

            return cuda_handle

        patches.wrap("cuda-fsdp", module, "FullyShardedDataParallel.__init__",
                     lambda original: patches.rebinding(original, adjust_v1))
    elif module.__name__ == FSDP_MODULES[3]:
        patches.wrap("cuda-fsdp", module, "FlatParamHandle.flat_param_to", _copying_flat_param_to)
    elif module.__name__ == FSDP_MODULES[1]:
        def accept_cpu_states(module_states: Any) -> None:
            """The emulated GPUs' tensors are CPU tensors: nothing to refuse (see the module docstring)."""
            return None

        patches.replace("cuda-fsdp", module, "_check_module_states_for_sync_module_states", accept_cpu_states)
    else:
        def make(original: Any) -> Any:
            def _get_device_from_mesh(mesh: Any) -> Any:
                if getattr(mesh, "device_type", None) == "cuda":
                    return _cpu_for_cuda("cuda", "fully_shard over a cuda DeviceMesh")
                return original(mesh)

            return _get_device_from_mesh

        patches.wrap("cuda-fsdp", module, "_get_device_from_mesh", make)
