"""CUDA on the CPU: make code written for GPU hosts run unchanged in an emulated host.

Applied once, right after ``import torch`` finishes, when ``EMULATOR_GPU_COUNT`` > 0, in two steps
around the streams and the accelerator hooks (``_sm_emulator_torch`` owns the order; this module
imports neither ``_sm_emulator_streams`` nor ``_sm_emulator_devices``, which build on it).

Emulated (all work happens on the CPU):

- ``torch.cuda.is_available()`` is True, ``device_count()`` is ``EMULATOR_GPU_COUNT``;
  ``set_device``/``current_device``/``torch.cuda.device(i)``, ``get_device_name`` (
  ``EMULATOR_GPU_MODEL``), ``get_device_properties``/``get_device_capability`` (from the model
  name), ``is_bf16_supported``, ``is_initialized``/``init``.
- Tensors and modules "moved to the GPU" stay on the CPU: ``Tensor.cuda()``, ``Module.cuda()``,
  ``.to("cuda")``/``.to("cuda:1")``/``.to(torch.device("cuda", i))``, ``device=`` of the factory
  functions (``torch.zeros``, ``torch.tensor``, ``*_like``, ``Tensor.new_*`` ...). A device index
  at or beyond the emulated GPU count fails like CUDA does ("invalid device ordinal").
- ``pin_memory()`` returns the tensor; ``torch.cuda.synchronize``/``empty_cache``/``ipc_collect``
  do nothing; seeds and RNG states use the CPU generator; allocation queries return 0, and the
  device's memory (``mem_get_info()`` → ``(free, total)``, ``get_device_properties().total_memory``)
  is the instance type's GPU memory as CUDA reports it (``EMULATOR_GPU_MEMORY``), all of it free:
  nothing is ever allocated on the emulated device, so memory-based batch sizing picks what it
  would pick on a fresh real GPU (a real one has a few hundred MiB less free once the CUDA context
  exists).
- ``DistributedDataParallel(model, device_ids=[local_rank])`` on a CPU model: the device ids are
  dropped. ``torch.nn.DataParallel`` runs the wrapped module once, on the CPU.

- Streams, events and NVTX markers: see ``_sm_emulator_streams`` (work on any stream has already
  run on the CPU; events stamp the wall clock).

Not emulated (``RuntimeError("not emulated: <call>")``): external streams, CUDA graphs,
``torch.cuda.nccl``, ``torch.cuda.comm``. Since no graph can be captured,
``torch.cuda.is_current_stream_capturing()`` is False (a CUDA build's asks the driver, which
fails without one: torch 2.2's ``Optimizer`` calls it on every step once ``is_available()``).
Not patched (fail as torch on a CPU build does):
``torch.cuda.FloatTensor``-style legacy types, ``torch.Generator(device="cuda")``, custom CUDA
kernels, anything in ``torch._C._cuda_*``. ``torch.device("cuda", i)`` objects themselves are
left alone (they are plain values), only their use is mapped to the CPU.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable
from typing import Any

import _sm_emulator_memory as memory
import _sm_emulator_patches as patches
from _sm_emulator_log import log_once
from _sm_emulator_protocol import ENV_GPU_MODEL

_CAPABILITY_BY_MODEL = {
    "H200": (9, 0),
    "H100": (9, 0),
    "A100": (8, 0),
    "A10G": (8, 6),
    "L40S": (8, 9),
    "L4": (8, 9),
    "V100": (7, 0),
    "T4": (7, 5),
    "K80": (3, 7),
}

_NOT_EMULATED_CLASSES = ("ExternalStream", "CUDAGraph", "graph")
_NOT_EMULATED_FUNCTIONS = (
    "make_graphed_callables", "graph_pool_handle", "caching_allocator_alloc", "caching_allocator_delete",
)  # fmt: skip
_NOT_EMULATED_MODULES = ("nccl", "comm")

_ZERO_MEMORY = (
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_cached", "max_memory_cached", "device_memory_used",
)  # fmt: skip
_MEMORY_NO_OPS = (
    "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
    "reset_accumulated_memory_stats", "empty_cache", "set_per_process_memory_fraction",
)  # fmt: skip


#: Emulated GPUs on this host (``EMULATOR_GPU_COUNT``, default 0); bytes of memory per emulated GPU
#: (``EMULATOR_GPU_MEMORY``, default 0). Read where the memory accounting reads them.
gpu_count = memory.gpu_count
gpu_memory = memory.capacity


def gpu_model() -> str:
    """The emulated GPU's name (``EMULATOR_GPU_MODEL``)."""
    return os.environ.get(ENV_GPU_MODEL) or "NVIDIA Emulated GPU"


def not_emulated(call: str) -> RuntimeError:
    """The error every unsupported CUDA feature raises."""
    return RuntimeError(
        f"not emulated: {call} (sagemaker-cluster-emulator runs CUDA code on the CPU; "
        "external streams, graphs and NCCL calls have no CPU stand-in)"
    )


def _not_emulated_function(call: str) -> Callable[..., Any]:
    def raiser(*args: Any, **kwargs: Any) -> Any:
        raise not_emulated(call)

    raiser.__name__ = call.rsplit(".", 1)[-1]
    return raiser


def _not_emulated_class(call: str, original: Any = None) -> type:
    """A class whose construction raises ``not emulated``. It keeps the original's abstract bases
    from ``torch._streambase`` (torch 2.1 to 2.3: ``torch._dynamo`` asserts at import that
    ``torch.cuda.Event``/``Stream`` derive from ``_EventBase``/``_StreamBase``)."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise not_emulated(call)

    bases = tuple(b for b in getattr(original, "__mro__", ())[1:] if b.__module__ == "torch._streambase")
    cls = type(call.rsplit(".", 1)[-1], bases, {"__init__": __init__, "__doc__": f"{call}: not emulated"})
    cls.__abstractmethods__ = frozenset()  # type: ignore[attr-defined]  # constructing it raises not_emulated
    return cls


class _NotEmulatedModule(types.ModuleType):
    """A module whose every attribute raises ``not emulated``."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise not_emulated(f"{self.__name__}.{name}")


class _State:
    current = 0


def _index(device: Any) -> int | None:
    """The CUDA index ``device`` names, or None if it does not name a CUDA device."""
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        if not device.startswith("cuda"):
            return None
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda":
        return _State.current if device.index is None else device.index
    return None


def _check(index: int) -> None:
    if index < 0 or index >= gpu_count():
        raise RuntimeError(
            f"CUDA error: invalid device ordinal (emulated: this host has {gpu_count()} "
            f"GPU(s), so valid indices are 0..{gpu_count() - 1}; asked for {index})"
        )


def map_device(device: Any, *, ints_are_cuda: bool = True) -> Any:
    """``device`` with any CUDA device replaced by ``"cpu"`` (after checking its index)."""
    if isinstance(device, int) and not ints_are_cuda:
        return device
    index = _index(device)
    if index is None:
        return device
    _check(index)
    log_once("cuda-tensors", "CUDA tensors and modules are kept on the CPU (emulated GPUs)")
    return "cpu"


def _cuda_index(device: Any) -> int | None:
    """The emulated GPU ``device`` names (a string, ``torch.device`` or int), or None."""
    index = _index(device)
    return None if index is None or index < 0 else index


def _with_device_kwarg(function: Callable[..., Any]) -> Callable[..., Any]:
    """A factory whose ``device="cuda[:i]"`` means the CPU; the result counts on emulated GPU *i*
    (``_sm_emulator_memory.place``), a ``device="cpu"`` result does not."""
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is None:
            if getattr(memory._State.local, "device", None) is None:
                return function(*args, **kwargs)
            with memory.cpu_factories():  # a Python-level call inside DDP's bucket building: a CPU tensor
                return function(*args, **kwargs)
        index = _cuda_index(device)
        kwargs["device"] = map_device(device)
        if index is None:
            return memory.unplace(function(*args, **kwargs), args[0] if args else None)
        return memory.place(function(*args, **kwargs), index)

    return wrapper


def _patch_tensor(torch: Any) -> None:
    tensor = torch.Tensor
    original_to = tensor.to

    def make_to(original: Any) -> Any:
        @functools.wraps(original)
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            target: Any = None
            if args and isinstance(args[0], (str, torch.device, int)) and not isinstance(args[0], bool):
                target = args[0]
                args = (map_device(args[0]), *args[1:])
            if kwargs.get("device") is not None:
                target = kwargs["device"]
                kwargs["device"] = map_device(kwargs["device"])
            result = original(self, *args, **kwargs)
            if target is None and args and isinstance(args[0], torch.Tensor):  # .to(other): other's device
                index = memory.device_of(args[0])
                return memory.place(result, index) if index is not None else result
            if target is None:
                return result
            index = _cuda_index(target)
            return memory.place(result, index) if index is not None else memory.unplace(result, self)

        return to

    def cuda(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        target = _State.current if device is None else device
        map_device(target)
        result = original_to(self, "cpu", non_blocking=non_blocking, **kwargs)
        index = _cuda_index(target)
        return memory.place(result, index) if index is not None else result

    def pin_memory(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    patches.wrap("cuda-tensors", torch, "Tensor.to", make_to)
    patches.replace("cuda-tensors", torch, "Tensor.cuda", cuda)
    patches.replace("cuda-tensors", torch, "Tensor.pin_memory", pin_memory)
    for entry in patches.entries("cuda-tensors"):
        if entry.attribute.startswith("Tensor.new_"):
            patches.wrap("cuda-tensors", torch, entry.attribute, _with_device_kwarg)
    for entry in patches.entries("cuda-factories"):
        patches.wrap("cuda-factories", torch, entry.attribute, _with_device_kwarg)


class _DeviceContext:
    """Stand-in for ``torch.cuda.device(i)``: switches the current emulated device."""

    def __init__(self, device: Any) -> None:
        self.index = _index(device) if device is not None else None
        self.previous = _State.current

    def __enter__(self) -> _DeviceContext:
        self.previous = _State.current
        if self.index is not None and self.index >= 0:
            _set_device(self.index)
        return self

    def __exit__(self, *exc: object) -> None:
        _State.current = self.previous


def _set_device(device: Any) -> None:
    index = _index(device)
    if index is None:
        raise ValueError(f"Expected a cuda device, but got: {device}")
    if index < 0:
        return
    _check(index)
    _State.current = index
    log_once("set-device", f"torch.cuda.set_device({index}): emulated GPU {index} (runs on CPU)")


def _announce() -> None:
    log_once(
        "cuda",
        f"torch.cuda reports {gpu_count()} emulated {gpu_model()} GPU(s); CUDA work runs on CPU",
    )


def _is_available() -> bool:
    _announce()
    return True


def _device_count() -> int:
    _announce()
    return gpu_count()


def _memory_index(device: Any = None) -> int:
    """The emulated GPU a memory query's ``device`` names (None: the current one), checked."""
    index = _State.current if device is None else _index(device)
    _check(index if index is not None else -1)
    return index  # type: ignore[return-value]  # _check refused None


def _memory_functions(torch: Any, mem_get_info: Callable[..., tuple[int, int]],
                      ignore: Callable[[str], Callable[..., None]]) -> dict[str, Any]:
    """The ``cuda-memory`` group: counted (``_sm_emulator_memory``), or with
    ``EMULATOR_GPU_MEMORY_MODE`` other than ``count`` the old answers: nothing allocated, the whole device free."""
    if memory.enabled():
        return {"utilization": lambda device=None: 0, **memory.memory_api(torch, _memory_index)}
    return {
        "memory_stats": lambda device=None: {},
        "memory_summary": lambda device=None, abbreviated=False: "",
        "mem_get_info": mem_get_info,
        "utilization": lambda device=None: 0,
        **{name: (lambda device=None: 0) for name in _ZERO_MEMORY},
        **{name: ignore(name) for name in _MEMORY_NO_OPS},
    }


def patch_torch_cuda(torch: Any) -> None:
    """The first step: ``torch.cuda``'s devices, RNG, memory, no-ops and what is not emulated."""
    cuda = torch.cuda
    model = gpu_model()
    memory = gpu_memory()
    capability = next((cap for key, cap in _CAPABILITY_BY_MODEL.items() if key in model), (8, 0))

    def properties(device: Any = None) -> types.SimpleNamespace:
        index = _State.current if device is None else _index(device)
        _check(index if index is not None else -1)
        return types.SimpleNamespace(
            name=model, major=capability[0], minor=capability[1], total_memory=memory,
            multi_processor_count=0, is_integrated=False, is_multi_gpu_board=False,
        )  # fmt: skip

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` bytes: the type's GPU memory, all of it free (see the module docstring)."""
        properties(device)  # checks the index
        return memory, memory

    def rng_state(device: Any = "cuda") -> Any:
        return torch.get_rng_state()

    def ignore(name: str) -> Callable[..., None]:
        # A distinct function per name: torch._dynamo maps torch objects by identity.
        def nothing(*args: Any, **kwargs: Any) -> None:
            return None

        nothing.__name__ = name
        return nothing

    replacements: dict[str, dict[str, Any]] = {
        "cuda-devices": {
            "is_available": _is_available,
            "device_count": _device_count,
            "is_initialized": lambda: True,
            "current_device": lambda: _State.current,
            "set_device": _set_device,
            "device": _DeviceContext,
            "device_of": lambda tensor: _DeviceContext(None),
            "get_device_name": lambda device=None: properties(device).name,
            "get_device_properties": properties,
            "get_device_capability": lambda device=None: (
                properties(device).major,
                properties(device).minor,
            ),
            "is_bf16_supported": lambda including_emulation=True: capability >= (8, 0),
        },
        "cuda-rng": {
            "manual_seed": ignore("manual_seed"),
            "manual_seed_all": ignore("manual_seed_all"),
            "seed": ignore("seed"),
            "seed_all": ignore("seed_all"),
            "initial_seed": lambda: torch.initial_seed(),
            "get_rng_state": rng_state,
            "get_rng_state_all": lambda: [torch.get_rng_state() for _ in range(gpu_count())],
            "set_rng_state": ignore("set_rng_state"),
            "set_rng_state_all": ignore("set_rng_state_all"),
        },
        "cuda-memory": _memory_functions(torch, mem_get_info, ignore),
        "cuda-no-ops": {e.attribute: ignore(e.attribute) for e in patches.entries("cuda-no-ops")},
        "cuda-not-emulated": {
            **{name: _not_emulated_class(f"torch.cuda.{name}", getattr(cuda, name, None))
               for name in _NOT_EMULATED_CLASSES},
            **{name: _not_emulated_function(f"torch.cuda.{name}") for name in _NOT_EMULATED_FUNCTIONS},
            **{name: _NotEmulatedModule(f"torch.cuda.{name}") for name in _NOT_EMULATED_MODULES},
            "is_current_stream_capturing": lambda: False,
        },
    }
    for group, values in replacements.items():
        for name, value in values.items():
            patches.replace(group, cuda, name, value)


def _patch_parallel(torch: Any) -> None:
    def adjust_ddp_init(arguments: dict[str, Any]) -> None:
        device_ids, output_device = arguments.get("device_ids"), arguments.get("output_device")
        on_cpu = all(p.device.type == "cpu" for p in arguments["module"].parameters())
        if on_cpu and (device_ids is not None or output_device is not None):
            for device in device_ids or ():
                map_device(device)
            log_once(
                "ddp-device-ids",
                f"DistributedDataParallel(device_ids={device_ids!r}): the model is on the CPU "
                "(emulated GPU), device_ids/output_device are dropped",
            )
            arguments["device_ids"] = arguments["output_device"] = None

    def dp_init(self: Any, module: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0) -> None:
        torch.nn.Module.__init__(self)
        self.module = module
        self.device_ids = []
        self.output_device = None
        self.dim = dim
        self.src_device_obj = torch.device("cpu")
        log_once("data-parallel", "torch.nn.DataParallel runs the module once, on the CPU")

    patches.wrap("cuda-parallel", torch.nn.parallel, "DistributedDataParallel.__init__",
                 lambda original: memory.ddp_buckets(patches.rebinding(original, adjust_ddp_init)))
    patches.replace("cuda-parallel", torch.nn, "DataParallel.__init__", dp_init)


def patch_tensors(torch: Any) -> None:
    """The last step: tensors, factory functions and ``DistributedDataParallel``/``DataParallel``."""
    _patch_tensor(torch)
    _patch_parallel(torch)
