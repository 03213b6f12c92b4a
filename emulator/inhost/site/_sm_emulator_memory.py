"""Emulated GPUs hold memory as CUDA does: the bytes each emulated GPU would hold, per process.

Applied right after ``import torch`` when ``EMULATOR_GPU_COUNT`` > 0 and ``EMULATOR_GPU_MEMORY_MODE``
is ``count`` (the job's ``gpu_memory="count"``, ``--gpu-memory count``; off by default: counting
cost about 1.5x the CPU of a small 2 x 2 FSDP job, measured 2026-12-07); ``_sm_emulator_torch`` calls
:func:`install` after the CUDA patches.

What counts on emulated GPU *i* (the tensors that would live on ``cuda:i`` on SageMaker), by
storage (views share their base's bytes; a storage counts once):

- tensors moved there: ``Tensor.to("cuda[:i]")``/``.cuda()``, so ``Module.cuda()``/``.to()``, and
  the factories' ``device="cuda[:i]"`` (``_sm_emulator_cuda`` calls :func:`place`). The move keeps
  the CPU storage (emulated GPUs are the CPU), so a CPU tensor moved to the GPU and still used on
  the CPU counts until both are gone;
- every new storage an operator makes from an input on GPU *i*: activations, temporaries, gradients,
  optimizer states, FSDP's flat and unsharded parameters, collective output buffers made
  ``*_like`` a GPU tensor. A ``TorchDispatchMode`` pushed for the whole process (in the thread that
  imported torch; autograd's backward runs under it too) sees each operator's inputs and outputs;
  tensor subclasses (DTensor) are let through so that their local operators are seen;
- factory calls with no tensor input made by torch's C++ while DDP builds or rebuilds its gradient
  buckets (``DistributedDataParallel.__init__`` and each ``_pre_forward``): on the DDP module's GPU;
- storages resized in place (``UntypedStorage.resize_``: FSDP frees and re-allocates unsharded
  parameters so) and tensors resized by operators (``resize_``, ``set_``).

A storage stops counting when it dies (a weak reference's callback, as torch's own
``torch.distributed._tools.mem_tracker.MemTracker`` does). Each storage is one request to
:class:`_sm_emulator_allocator.DeviceAllocator` (the caching allocator's rounding, pools, segments,
peaks and OOM); ``torch.cuda``'s memory API answers from it (:func:`memory_api`).

Not counted: CPU tensors (a batch before ``.to(device)``, ``state_dict(offload_to_cpu)`` copies made by
``.cpu()``); a ``.to("cpu")`` of a GPU tensor that returns the same storage keeps counting;
operators run in threads other than the one that imported torch (their outputs count only if moved
or made on a GPU explicitly); memory outside the caching allocator (the CUDA context: an estimate,
see ``_sm_emulator_allocator``; NCCL's buffers, cuBLAS/cuDNN workspaces); fragmentation beyond the
allocator's own block rules. Two processes using the same GPU are not added up. The check happens
after the CPU operator ran: an allocation over capacity raises CUDA's ``OutOfMemoryError`` once the
(CPU) storage exists, which is then dropped.

Each process that used an emulated GPU writes ``gpumem-<host>-<pid>.json`` in ``EMULATOR_DIAG_DIR`` at
exit and when it runs out of memory (peak allocated/reserved per GPU, capacity, the OOM's text);
``emulator.diagnostics.gpu_memory`` reports them.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import _sm_emulator_allocator as alloc
from _sm_emulator_log import log_once, rank_label
from _sm_emulator_names import ENV_DIAG_DIR, ENV_GPU_COUNT, ENV_GPU_MEMORY, ENV_GPU_MEMORY_MODE, ENV_GPU_MODEL

#: The diagnostics file each process writes (``gpumem-<host>-<pid>.json``).
FILE_PREFIX = "gpumem-"


class _State:
    allocators: ClassVar[dict[int, alloc.DeviceAllocator]] = {}
    #: storage key (``_cdata``) -> (device, block or None for 0 bytes, weak reference)
    storages: ClassVar[dict[int, tuple[int, alloc.Block | None, Any]]] = {}
    lock = threading.RLock()
    local = threading.local()  # .device: the GPU of factory calls with no tensor input (DDP buckets)
    pid = os.getpid()
    oom: str | None = None
    oom_device: int | None = None
    enabled = False


def gpu_count() -> int:
    """Emulated GPUs on this host (``EMULATOR_GPU_COUNT``, default 0)."""
    try:
        return max(0, int(os.environ.get(ENV_GPU_COUNT, "0")))
    except ValueError:
        return 0


def capacity() -> int:
    """Bytes per emulated GPU (``EMULATOR_GPU_MEMORY``: the type's, or the job's override)."""
    try:
        return max(0, int(os.environ.get(ENV_GPU_MEMORY, "0")))
    except ValueError:
        return 0


def enabled() -> bool:
    """Whether this process counts GPU memory: ``EMULATOR_GPU_MEMORY_MODE`` is ``count``, the host
    has emulated GPUs whose memory is known (``EMULATOR_GPU_MEMORY`` > 0), and torch has what counting
    needs (dispatch modes, ``OutOfMemoryError``: torch 2.x; on older releases, or with no known
    capacity, the memory API answers as with ``off``)."""
    if os.environ.get(ENV_GPU_MEMORY_MODE, "off") != "count" or gpu_count() == 0 or capacity() == 0:
        return False
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode, _push_mode  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch, "OutOfMemoryError")


def allocator(device: int) -> alloc.DeviceAllocator:
    """The allocator of emulated GPU ``device`` (made on first use)."""
    found = _State.allocators.get(device)
    if found is None:
        import torch

        found = alloc.DeviceAllocator(device, capacity(), error=torch.OutOfMemoryError)
        _State.allocators[device] = found
    return found


# -- storages ------------------------------------------------------------------------------------
def _storages(tensor: Any) -> Iterator[Any]:
    """The untyped storages behind ``tensor`` (a traceable wrapper subclass: its inner tensors')."""
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is not None:
        names, _ = flatten()
        for name in names:
            inner = getattr(tensor, name, None)
            if inner is not None and hasattr(inner, "untyped_storage"):
                yield from _storages(inner)
        return
    if tensor.layout is not _LAYOUT[0] or tensor.device.type != "cpu":
        return
    try:
        yield tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested, functional wrappers: not counted
        return


_LAYOUT: list[Any] = []


def _released(key: int, _ref: Any = None) -> None:
    with _State.lock:
        entry = _State.storages.pop(key, None)
        if entry is not None and entry[1] is not None:
            _State.allocators[entry[0]].free(entry[1])


def _track(storage: Any, device: int) -> None:
    """Count ``storage`` on GPU ``device`` (moving it there if it counted elsewhere)."""
    key = storage._cdata
    with _State.lock:
        entry = _State.storages.get(key)
        if entry is not None:
            if entry[0] == device:
                return
            _released(key)
        nbytes = storage.nbytes()
        try:
            block = allocator(device).malloc(nbytes) if nbytes else None
        except Exception as exc:  # torch.OutOfMemoryError
            _out_of_memory(device, str(exc))
            raise
        _State.storages[key] = (device, block, weakref.ref(storage, functools.partial(_released, key)))


def _resynced(storage: Any) -> None:
    """A tracked storage whose size changed in place: free its block, take one of the new size."""
    key = storage._cdata
    with _State.lock:
        entry = _State.storages.get(key)
        if entry is None:
            return
        nbytes = storage.nbytes()
        if (entry[1].requested if entry[1] is not None else 0) == nbytes:
            return
        device = entry[0]
        if entry[1] is not None:
            _State.allocators[device].free(entry[1])
        try:
            block = allocator(device).malloc(nbytes) if nbytes else None
        except Exception as exc:
            _State.storages[key] = (device, None, entry[2])
            _out_of_memory(device, str(exc))
            raise
        _State.storages[key] = (device, block, entry[2])


def device_of(tensor: Any) -> int | None:
    """The emulated GPU ``tensor``'s storage counts on, or None (a CPU tensor)."""
    for storage in _storages(tensor):
        entry = _State.storages.get(storage._cdata)
        if entry is not None:
            return entry[0]
    return None


def place(result: Any, device: int) -> Any:
    """Count every tensor in ``result`` (a tensor, or a list/tuple of them) on GPU ``device``;
    returns ``result``. Called for ``.to("cuda")``, ``.cuda()`` and ``device="cuda"`` factories."""
    if not _State.enabled:
        return result
    import torch

    for tensor in (result if isinstance(result, (list, tuple)) else (result,)):
        if isinstance(tensor, torch.Tensor):
            for storage in _storages(tensor):
                _track(storage, device)
    return result


def unplace(result: Any, source: Any) -> Any:
    """A CPU copy (``.to("cpu")``, ``device="cpu"``) that the dispatch mode counted because its
    source is on a GPU: stop counting it, unless it is the source's own storage."""
    if not _State.enabled or result is source:
        return result
    import torch

    if isinstance(result, torch.Tensor) and (source is None or not isinstance(source, torch.Tensor)
                                             or result.untyped_storage()._cdata != source.untyped_storage()._cdata):
        for storage in _storages(result):
            _released(storage._cdata)
    return result


class gpu_factories:
    """Within this context (this thread), storages made with no tensor input count on ``device``."""

    def __init__(self, device: int | None) -> None:
        self.device = device

    def __enter__(self) -> None:
        self.previous = getattr(_State.local, "device", None)
        _State.local.device = self.device

    def __exit__(self, *exc: object) -> None:
        _State.local.device = self.previous


class cpu_factories(gpu_factories):
    """A Python-level factory call (``torch.zeros(...)``) without ``device=cuda``: its result is a
    CPU tensor even inside :class:`gpu_factories`."""

    def __init__(self) -> None:
        super().__init__(None)


# -- the dispatch mode ---------------------------------------------------------------------------
def _input_device(args: Any, kwargs: Any, torch: Any) -> int | None:
    storages = _State.storages
    tensor_type = torch.Tensor
    saw_tensor = False
    for value in (*args, *kwargs.values()) if kwargs else args:
        items = value if type(value) in (list, tuple) else (value,)
        for item in items:
            if isinstance(item, tensor_type):
                saw_tensor = True
                try:
                    entry = storages.get(item.untyped_storage()._cdata)
                except (RuntimeError, NotImplementedError):
                    continue
                if entry is not None:
                    return entry[0]
    return None if saw_tensor else getattr(_State.local, "device", None)


def _make_mode(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    plain = (torch.Tensor, torch.nn.Parameter)
    tensor_type = torch.Tensor

    skip = _dynamo_skip()

    class GpuMemoryMode(TorchDispatchMode):
        """Counts the outputs of operators on emulated-GPU tensors (see the module docstring)."""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps __torch_dispatch__ in torch._disable_dynamo (several µs per operator);
            # where it can, _make_mode marks the code objects as skipped instead (no cost per call).
            return skip is None

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            for t in types:
                if t not in plain and hasattr(t, "__tensor_flatten__"):
                    return NotImplemented  # a subclass (DTensor) first: its local operators come back here
            out = func(*args, **(kwargs or {}))
            if not _State.storages and getattr(_State.local, "device", None) is None:
                return out
            device = _input_device(args, kwargs, torch)
            if device is None:
                return out
            for value in out if type(out) in (list, tuple) else (out,):
                if isinstance(value, tensor_type) and value.device.type == "cpu":
                    try:
                        storage = value.untyped_storage()
                    except (RuntimeError, NotImplementedError):
                        continue
                    entry = _State.storages.get(storage._cdata)
                    if entry is None:
                        _track(storage, device)
                    elif entry[1] is None or entry[1].requested != storage.nbytes():
                        _resynced(storage)
            return out

    if skip is not None:
        for code in (GpuMemoryMode.__torch_dispatch__.__code__, _input_device.__code__, _track.__code__,
                     _resynced.__code__, _released.__code__):
            skip(code)
    return GpuMemoryMode()


def _dynamo_skip() -> Callable[[Any], None] | None:
    """Marks a code object so that TorchDynamo never compiles it or what it calls (torch 2.x with
    ``set_code_exec_strategy``); None where that does not exist."""
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:
        return None

    def skip(code: Any) -> None:
        set_code_exec_strategy(code, FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))

    return skip


def _patch_storage_resize(torch: Any) -> None:
    import _sm_emulator_patches as patches

    def make(original: Any) -> Any:
        @functools.wraps(original)
        def resize_(self: Any, size: int) -> Any:
            result = original(self, size)
            if self._cdata in _State.storages:
                _resynced(self)
            return result

        return resize_

    patches.wrap("cuda-memory", torch, "UntypedStorage.resize_", make)


def ddp_buckets(init: Any) -> Any:
    """``DistributedDataParallel.__init__`` (already wrapped by ``_sm_emulator_cuda``) whose C++
    gradient buckets, factories with no tensor input, count on the module's GPU; so do those
    ``_pre_forward`` makes when it rebuilds them."""
    @functools.wraps(init)
    def __init__(self: Any, module: Any, *args: Any, **kwargs: Any) -> None:
        first = next(iter(module.parameters()), None) if _State.enabled else None
        device = device_of(first) if first is not None else None
        if device is None:
            init(self, module, *args, **kwargs)
            return
        with gpu_factories(device):
            init(self, module, *args, **kwargs)
        pre_forward = self._pre_forward

        def _pre_forward(*a: Any, **k: Any) -> Any:
            with gpu_factories(device):
                return pre_forward(*a, **k)

        self._pre_forward = _pre_forward

    return __init__


# -- the torch.cuda memory API -------------------------------------------------------------------
def memory_api(torch: Any, index: Callable[[Any], int]) -> dict[str, Any]:
    """The ``torch.cuda`` functions that answer from the count; ``index(device)``: the emulated
    GPU a ``device`` argument names (None: the current one), checked."""
    original_summary = getattr(torch.cuda.memory, "memory_summary", None)

    def stats_of(device: Any = None) -> alloc.DeviceAllocator:
        return allocator(index(device))

    def memory_stats(device: Any = None) -> dict[str, int]:
        return stats_of(device).memory_stats()

    def memory_allocated(device: Any = None) -> int:
        return stats_of(device).allocated

    def max_memory_allocated(device: Any = None) -> int:
        return stats_of(device).stat("allocated_bytes").peak

    def memory_reserved(device: Any = None) -> int:
        return stats_of(device).reserved

    def max_memory_reserved(device: Any = None) -> int:
        return stats_of(device).stat("reserved_bytes").peak

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)``: total less the estimated CUDA context and what this process reserved."""
        a = stats_of(device)
        return a.device_free, a.capacity

    def device_memory_used(device: Any = None) -> int:
        a = stats_of(device)
        return a.reserved + a.context

    def reset_peak_memory_stats(device: Any = None) -> None:
        stats_of(device).reset_peaks()

    def reset_accumulated_memory_stats(device: Any = None) -> None:
        stats_of(device).reset_accumulated()

    def empty_cache() -> None:
        with _State.lock:
            for a in _State.allocators.values():
                a.release_cached()

    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        if not isinstance(fraction, float | int) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        stats_of(device).fraction = float(fraction)

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        """torch's own ``memory_summary`` over :func:`memory_stats` (it reads ``torch.cuda.memory``'s
        ``memory_stats``, replaced with this one)."""
        if original_summary is None:
            return ""
        return str(original_summary(device=index(device), abbreviated=abbreviated))

    return {
        "memory_stats": memory_stats, "memory_summary": memory_summary, "mem_get_info": mem_get_info,
        "memory_allocated": memory_allocated, "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved, "max_memory_reserved": max_memory_reserved,
        "memory_cached": memory_reserved, "max_memory_cached": max_memory_reserved,
        "device_memory_used": device_memory_used, "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": reset_peak_memory_stats, "reset_max_memory_cached": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": reset_accumulated_memory_stats, "empty_cache": empty_cache,
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
    }


# -- the report ----------------------------------------------------------------------------------
def report() -> dict[str, Any]:
    """What this process's emulated GPUs held: per GPU peak allocated/reserved, capacity, OOMs."""
    env = os.environ
    # a script the toolkit starts by itself (no launcher, no world) is the job's only rank: rank 0
    rank = next((env[k] for k in ("RANK", "OMPI_COMM_WORLD_RANK") if k in env),
                None if "WORLD_SIZE" in env else "0")
    local = next((env[k] for k in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") if k in env), None)
    gpus = {str(i): {"peak_allocated": a.stat("allocated_bytes").peak, "peak_reserved": a.stat("reserved_bytes").peak,
                     "allocated": a.allocated, "reserved": a.reserved, "capacity": a.capacity,
                     "context": a.context, "num_ooms": a.num_ooms}
            for i, a in sorted(_State.allocators.items())}
    return {"host": env.get("SM_CURRENT_HOST") or socket.gethostname(), "pid": os.getpid(),
            "rank": int(rank) if rank is not None and rank.isdigit() else None,
            "local_rank": int(local) if local is not None and local.isdigit() else None,
            "model": env.get(ENV_GPU_MODEL, ""), "gpus": gpus, "oom": _State.oom, "oom_gpu": _State.oom_device}


def write_report() -> None:
    """Write :func:`report` to ``EMULATOR_DIAG_DIR`` (nothing when unset, or when this process never
    held GPU memory); a failure to write never breaks the script."""
    directory = os.environ.get(ENV_DIAG_DIR)
    if not directory or os.getpid() != _State.pid:
        return
    data = report()
    if _State.oom is None and not any(g["peak_reserved"] for g in data["gpus"].values()):
        return
    path = os.path.join(directory, f"{FILE_PREFIX}{data['host']}-{data['pid']}.json")
    try:
        with open(path + ".tmp", "w") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _out_of_memory(device: int, message: str) -> None:
    _State.oom, _State.oom_device = message, device
    log_once("gpu-oom", f"emulated GPU {device} is out of memory (rank {rank_label()}): {message[:160]}")
    write_report()


def _after_fork() -> None:
    """A forked child starts with nothing on its GPUs (CUDA cannot be used across a fork)."""
    _State.allocators = {}
    _State.storages = {}
    _State.lock = threading.RLock()
    _State.pid = os.getpid()
    _State.oom = _State.oom_device = None


def install(torch: Any) -> None:
    """Push the dispatch mode, patch storage resizes, and write the report at exit."""
    if _State.enabled or not enabled():
        return
    _LAYOUT[:] = [torch.strided]
    from torch.utils._python_dispatch import _push_mode

    _patch_storage_resize(torch)
    _push_mode(_make_mode(torch))
    _State.enabled = True
    atexit.register(write_report)
    os.register_at_fork(after_in_child=_after_fork)
    log_once("gpu-memory", f"emulated GPUs count the memory CUDA would hold ({alloc.format_size(capacity())} each)")
