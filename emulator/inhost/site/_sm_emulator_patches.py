"""The patch registry: every attribute of a third-party module that the in-host code replaces.

One :class:`Patch` per replaced attribute: the module that owns it, the attribute (dotted inside
the module, e.g. ``Tensor.to``), the fingerprint of the original in the pinned version (see
:func:`fingerprint`), what kind of patch it is, and, through its :class:`Group`, why and when it
is applied and whether it is safety-critical. The in-host code patches only through
:func:`replace` and :func:`wrap`, which look the target up here first.

Before patching, the target is checked (:func:`problems`):

- **missing**: the attribute does not exist;
- **broken**: a wrapper reads or passes parameters by name (``Patch.needs``) and one of them is
  gone, so it would mis-handle its arguments;
- **changed**: the fingerprint differs from the pinned version's (a new parameter, a new default,
  another docstring signature of a C function).

Every problem is logged, once per process, on stderr (the host's log) with what changed. On
another release of the pinned distribution than the pinned one (a framework image: torch 1.12 in
``sagemaker-emulator:torch1.12-*``), changed fingerprints are expected and summarised in one line
per distribution, and a critical target that is missing on an *older* release (added after it,
e.g. ``reduce_scatter_tensor`` in torch 1.13) is skipped: there is nothing to check a call of.
For a **critical** group a missing or broken target stops the process: :func:`replace`/:func:`wrap`
raise :class:`PatchMismatch` (an ``ImportError``) from the import that triggered the patch, so the
rank or the toolkit fails and the host with it. Critical means: without the patch, or with it
bound to an original whose parameters changed, a job could complete here with a result that
differs from SageMaker's and no error (the smddp stand-in's limit checks: a script SageMaker
rejects would pass). Every other group degrades loudly instead: a wrapper whose target is missing
or broken is skipped (the unpatched call then fails as it would on a CPU machine: "Torch not
compiled with CUDA", "not emulated: torch.cuda.CUDAGraph" ...), a replacement is applied anyway (it
is the emulator's own implementation and does not call the original).

The table of patches in ``docs/reference/patches.md`` is generated from this module (``python -m
emulator.inhost.patches --markdown``; ``tests/jobs/test_patch_registry.py`` fails when they differ)
and every entry is checked against the installed pinned packages by the same test (``--check`` runs
that check here).

Standard library only: imported in every host process that patches anything.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()
MISSING_FINGERPRINT = "<missing>"


class PatchMismatch(ImportError):
    """A critical patch's target is missing or its parameters changed (see the module docstring)."""


class TorchReplaced(PatchMismatch):
    """A critical patch does not fit because the job's ``requirements.txt`` replaced the DLC's
    torch (``EMULATOR_DLC_TORCH``) with another release: the message names both."""


def torch_replacement() -> tuple[str, str] | None:
    """``(the DLC's torch, the installed torch)`` when they are different releases, else None."""
    try:
        from _sm_emulator_names import ENV_DLC_TORCH
    except ImportError:  # the emulator's side
        from ._sm_emulator_names import ENV_DLC_TORCH
    dlc = os.environ.get(ENV_DLC_TORCH)
    if not dlc:
        return None
    import importlib.metadata

    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    return (dlc, installed) if installed.split("+")[0] != dlc.split("+")[0] else None


@dataclass(frozen=True)
class Group:
    """Patches applied together, for one reason."""

    name: str
    by: str  # the in-host module that applies them
    when: str  # the condition, as the docs' patch table states it
    why: str
    critical: bool = False


@dataclass(frozen=True)
class Patch:
    """One replaced attribute (see the module docstring)."""

    group: str
    module: str
    attribute: str  # dotted inside ``module``: "is_available", "Tensor.to", "DDPStrategy.determine_ddp_device_ids"
    expected: str  # fingerprint of the original in ``pinned``
    pinned: str  # "<distribution> <version>" the fingerprint was taken from ("2.6" matches 2.6.x)
    kind: str = "replace"  # "replace": the emulator's own implementation; "wrap": calls the original
    needs: tuple[str, ...] = ()  # parameters a wrapper reads or passes by name
    aliases: tuple[str, ...] = ()  # modules re-exporting the same object, patched with it

    @property
    def target(self) -> str:
        return f"{self.module}.{self.attribute}"


GROUPS = {g.name: g for g in (
    Group("cuda-devices", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "torch.cuda reports the host's emulated GPUs (count, model, capability); the current device is tracked"),
    Group("cuda-rng", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "CUDA seeds and RNG states use the CPU generator (setting them does nothing)"),
    Group("cuda-memory", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "the memory API answers from the bytes each emulated GPU holds (storages on cuda:i, rounded and "
          "cached as CUDA's caching allocator does; storage resizes are counted); allocations past the "
          "instance type's GPU memory raise CUDA's OutOfMemoryError; mem_get_info is capacity less reserved "
          "less an estimated CUDA context (EMULATOR_GPU_MEMORY_MODE=count); otherwise queries return 0, all free"),
    Group("cuda-no-ops", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "nothing to wait for, free or configure on the CPU"),
    Group("cuda-streams", "_sm_emulator_streams", "EMULATOR_GPU_COUNT > 0",
          "streams and events of the emulated GPUs: work on any stream has already run on the CPU (wait, "
          "query, synchronize return at once); Event.record stamps the wall clock, elapsed_time gives ms; "
          "record_stream does nothing"),
    Group("cuda-nvtx", "_sm_emulator_streams", "EMULATOR_GPU_COUNT > 0",
          "NVTX ranges and marks draw nothing (no Nsight); while torch.profiler records, each is a "
          "CPU-side record_function"),
    Group("cuda-accelerator", "_sm_emulator_devices", "EMULATOR_GPU_COUNT > 0",
          "torch.accelerator (torch's own code over these hooks) reports the emulated GPUs: current accelerator "
          "cuda, the current device and stream are torch.cuda's, memory info is the instance type's"),
    Group("cuda-fsdp", "_sm_emulator_devices", "EMULATOR_GPU_COUNT > 0",
          "FSDP's compute device for a CUDA device_id (v1) or a cuda DeviceMesh (FSDP2) is the CPU, where the "
          "tensors are; sync_module_states accepts those CPU tensors; moving an unsharded flat parameter to the "
          "CPU (offload_to_cpu state dicts) copies it, as a GPU-to-host copy does"),
    Group("cuda-not-emulated", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          'external streams, graphs, NCCL and comm raise RuntimeError("not emulated: <call>"); no stream is '
          "ever capturing a graph (is_current_stream_capturing() is False: a CUDA build's would ask the "
          "driver, e.g. from torch 2.2's optimizer step)"),
    Group("cuda-tensors", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "tensors and modules moved to a CUDA device stay on the CPU (an index past the emulated "
          "count fails as CUDA does)"),
    Group("cuda-factories", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "device='cuda[:i]' of the tensor factories means the CPU"),
    Group("cuda-parallel", "_sm_emulator_cuda", "EMULATOR_GPU_COUNT > 0",
          "DDP(model, device_ids=[i]) of a CPU model drops the device ids; DataParallel runs the "
          "module once, on the CPU"),
    Group("gloo-backend", "_sm_emulator_torch", "every process that imports torch",
          "nccl process groups run on gloo when the host has emulated GPUs; device_id and "
          "barrier(device_ids) are dropped for gloo; the process group is recorded for diagnostics; "
          "an nccl/smddp default group still alive at exit is destroyed from atexit, with torch's NCCL warning"),
    Group("diagnostics", "_sm_emulator_torch", "EMULATOR_DIAG_DIR set",
          "each DistributedSampler is recorded for the topology diagnostics"),
    Group("smddp-limits", "smdistributed.dataparallel.torch._emulated_backend",
          "import smdistributed.dataparallel.torch.torch_smddp",
          "SMDDP's documented and observed limits (all_reduce AVG, barrier(device_ids), sub-groups and "
          "other backends in DDP jobs); inferred ones (other ops, non-SMDDP collectives) are logged, "
          "or refused with smddp_strict", critical=True),
    Group("lightning-ddp", "_sm_emulator_lightning", "EMULATOR_GPU_COUNT > 0",
          "Lightning's DDP picks no CUDA device ids (the model lives on the CPU; with ids it would "
          "wrap DDP in a torch.cuda.Stream)"),
    Group("short-sleeps", "_sm_emulator_toolkit", "EMULATOR_SHORT_TOOLKIT_SLEEPS=1 (opt-in deviation)",
          "the toolkit's MPI-family waits (30 s after mpirun) are capped at 1 s, its 1-s polls at 0.2 s"),
    Group("toolkit-torch-version", "_sm_emulator_toolkit",
          "EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT=1 (ci profile)",
          "the toolkit sets SM_DLC_TORCH_VERSION from torch/version.py instead of importing torch"),
    Group("collectives", "_sm_emulator_collectives", "EMULATOR_DIAG_DIR set, EMULATOR_COLLECTIVES not 0",
          "each collective a rank issues is recorded (what, on which group, where, whether it returned) in "
          "a ring file the collective diagnostics read; the original runs unchanged"),
    Group("exit-records", "_sm_emulator_exits", "EMULATOR_DIAG_DIR set",
          "a multiprocessing child that ends with a non-zero exit code records the exception that ended it "
          "(multiprocessing prints and drops it); at interpreter shutdown the process notes that it is ending "
          "(so a hang or a crash in exit is told from one in training); the originals run unchanged"),
)}

_TORCH = "torch 2.13.0"
#: The pseudo-distribution of the standard library's entries (see :func:`installed_version`).
PYTHON = "python"
_C10D = "torch.distributed.distributed_c10d"
_FACTORY_DOC = "builtin_function_or_method: "
_TENSOR_DOC = "method_descriptor: "


def _table(group: str, module: str, pinned: str, entries: Mapping[str, str], **fields: Any) -> list[Patch]:
    return [Patch(group, module, attribute, expected, pinned, **fields) for attribute, expected in entries.items()]


_NO_DEVICE = "(device=None)"
_INDEX_ARG = "arg0: typing.SupportsInt | typing.SupportsIndex"

REGISTRY: tuple[Patch, ...] = tuple([
    *_table("cuda-devices", "torch.cuda", _TORCH, {
        "is_available": "()", "device_count": "()", "is_initialized": "()", "current_device": "()",
        "set_device": "(device)", "device": "(device)", "device_of": "(obj)",
        "get_device_name": _NO_DEVICE, "get_device_properties": _NO_DEVICE,
        "get_device_capability": _NO_DEVICE, "is_bf16_supported": "(including_emulation=True)",
    }),
    *_table("cuda-rng", "torch.cuda", _TORCH, {
        "manual_seed": "(seed)", "manual_seed_all": "(seed)", "seed": "()", "seed_all": "()",
        "initial_seed": "()", "get_rng_state": "(device='cuda')", "get_rng_state_all": "()",
        "set_rng_state": "(new_state, device='cuda')", "set_rng_state_all": "(new_states)",
    }),
    *_table("cuda-memory", "torch.cuda", _TORCH, {"utilization": _NO_DEVICE, "device_memory_used": _NO_DEVICE}),
    *_table("cuda-memory", "torch.cuda", _TORCH, {  # torch.cuda.memory's functions call each other there
        "memory_stats": _NO_DEVICE, "memory_summary": "(device=None, abbreviated=False)",
        "mem_get_info": _NO_DEVICE, "memory_allocated": _NO_DEVICE,
        "max_memory_allocated": _NO_DEVICE, "memory_reserved": _NO_DEVICE, "max_memory_reserved": _NO_DEVICE,
        "memory_cached": _NO_DEVICE, "max_memory_cached": _NO_DEVICE, "empty_cache": "()",
        "reset_peak_memory_stats": _NO_DEVICE, "reset_max_memory_allocated": _NO_DEVICE,
        "reset_max_memory_cached": _NO_DEVICE, "reset_accumulated_memory_stats": _NO_DEVICE,
        "set_per_process_memory_fraction": "(fraction, device=None)",
    }, aliases=("torch.cuda.memory",)),
    Patch("cuda-memory", "torch", "UntypedStorage.resize_", "method_descriptor", _TORCH, "wrap"),
    *_table("cuda-no-ops", "torch.cuda", _TORCH, {
        "synchronize": _NO_DEVICE, "ipc_collect": "()", "init": "()", "set_sync_debug_mode": "(debug_mode)",
    }),
    *_table("cuda-streams", "torch.cuda", _TORCH, {
        "Stream": "(device=None, priority=0, **kwargs)",
        "Event": "(enable_timing=False, blocking=False, interprocess=False, external=False)",
    }, aliases=("torch.cuda.streams",)),
    Patch("cuda-not-emulated", "torch.cuda", "is_current_stream_capturing", "()", _TORCH,
          aliases=("torch.cuda.graphs",)),
    *_table("cuda-streams", "torch.cuda", _TORCH, {
        "current_stream": _NO_DEVICE, "default_stream": _NO_DEVICE, "set_stream": "(stream)",
    }),
    Patch("cuda-streams", "torch", "Tensor.record_stream", _TENSOR_DOC + "record_stream(stream)", _TORCH),
    *_table("cuda-nvtx", "torch.cuda.nvtx", _TORCH, {
        "range_push": "(msg)", "range_pop": "()", "range_start": "(msg)", "range_end": "(range_id)",
        "mark": "(msg)", "range": "(msg, *args, **kwargs)",
    }),
    *_table("cuda-accelerator", "torch._C", _TORCH, {
        name: f"builtin_function_or_method: {name}({arg}) -> {result}" for name, arg, result in (
            ("_accelerator_getAccelerator", "", "torch.device | None"),
            ("_accelerator_getDeviceIndex", "", "int"),
            ("_accelerator_setDeviceIndex", _INDEX_ARG, "None"),
            ("_accelerator_exchangeDevice", _INDEX_ARG, "int"),
            ("_accelerator_maybeExchangeDevice", _INDEX_ARG, "int"),
            ("_accelerator_getStream", _INDEX_ARG, "torch.Stream"),
            ("_accelerator_setStream", "arg0: torch.Stream", "None"),
            ("_accelerator_synchronizeDevice", _INDEX_ARG, "None"),
            ("_accelerator_getDeviceCapability", _INDEX_ARG, "dict"),
            ("_accelerator_isAllocatorInitialized", "", "bool"),
            ("_accelerator_getMemoryInfo", _INDEX_ARG, "tuple[int, int]"),
            ("_accelerator_emptyHostCache", "", "None"),
        )
    }),
    Patch("cuda-fsdp", "torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel.__init__",
          "(self, module, process_group=None, sharding_strategy=None, cpu_offload=None, auto_wrap_policy=None, "
          "backward_prefetch=<BackwardPrefetch.BACKWARD_PRE: 1>, mixed_precision=None, ignored_modules=None, "
          "param_init_fn=None, device_id=None, sync_module_states=False, forward_prefetch=False, "
          "limit_all_gathers=True, use_orig_params=False, ignored_states=None, device_mesh=None)", _TORCH, "wrap",
          needs=("device_id",)),
    Patch("cuda-fsdp", "torch.distributed.fsdp._init_utils", "_check_module_states_for_sync_module_states",
          "(module_states)", _TORCH),
    Patch("cuda-fsdp", "torch.distributed.fsdp._fully_shard._fsdp_init", "_get_device_from_mesh", "(mesh)", _TORCH,
          "wrap", aliases=("torch.distributed.fsdp._fully_shard._fully_shard",)),
    Patch("cuda-fsdp", "torch.distributed.fsdp._flat_param", "FlatParamHandle.flat_param_to", "(self, *args, **kwargs)",
          _TORCH, "wrap"),
    *_table("cuda-not-emulated", "torch.cuda", _TORCH, {
        "ExternalStream": "(stream_ptr, device=None, **kwargs)",
        "CUDAGraph": "(keep_graph=False)",
        "graph": "(cuda_graph, pool=None, stream=None, capture_error_mode='global', enable_annotations=False, "
                 "check_input_liveness=False)",
        "make_graphed_callables": "(callables, sample_args, num_warmup_iters=3, allow_unused_input=False, pool=None)",
        "graph_pool_handle": "()", "caching_allocator_alloc": "(size, device=None, stream=None)",
        "caching_allocator_delete": "(mem_ptr)",
        "nccl": "module torch.cuda.nccl",
        "comm": MISSING_FINGERPRINT,  # a submodule, not an attribute until `import torch.cuda.comm`
    }),
    Patch("cuda-tensors", "torch", "Tensor.to", _TENSOR_DOC + "to(*args, **kwargs) -> Tensor", _TORCH, "wrap"),
    *_table("cuda-tensors", "torch", _TORCH, {
        "Tensor.cuda": _TENSOR_DOC + "cuda(device=None, non_blocking=False, memory_format=torch.preserve_format)"
                                     " -> Tensor",
        "Tensor.pin_memory": _TENSOR_DOC + "pin_memory() -> Tensor",
    }),
    *_table("cuda-tensors", "torch", _TORCH, {
        f"Tensor.{name}": _TENSOR_DOC + f"{name}({head}, *, dtype=None, device=None, requires_grad=False, "
                                        "layout=torch.strided, pin_memory=False) -> Tensor"
        for name, head in (("new_tensor", "data"), ("new_zeros", "size"), ("new_ones", "size"),
                           ("new_empty", "size"), ("new_full", "size, fill_value"))
    }, kind="wrap"),
    Patch("cuda-tensors", "torch", "Tensor.new_empty_strided",
          _TENSOR_DOC + "new_empty_strided(size, stride, dtype=None, device=None, requires_grad=False, "
                        "layout=torch.strided, pin_memory=False) -> Tensor", _TORCH, "wrap"),
    *_table("cuda-factories", "torch", _TORCH, {
        name: _FACTORY_DOC + doc if doc else _FACTORY_DOC.rstrip(": ") for name, doc in {
            "tensor": "tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False) -> Tensor",
            "as_tensor": "as_tensor(data: Any, *, dtype: Optional[dtype] = None, device: Optional[DeviceLikeType])"
                         " -> Tensor",
            "asarray": "asarray(obj: Any, *, dtype: Optional[dtype], device: Optional[DeviceLikeType], "
                       "copy: Optional[bool] = None, requires_grad: Optional[bool] = None) -> Tensor # noqa: B950",
            **{name: f"{name}(*size, *, out=None, dtype=None, layout=torch.strided, device=None, "
                     "requires_grad=False) -> Tensor" for name in ("zeros", "ones")},
            "empty": "empty(*size, *, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False, "
                     "pin_memory=False, memory_format=torch.contiguous_format) -> Tensor",
            "full": "full(size, fill_value, *, out=None, dtype=None, layout=torch.strided, device=None, "
                    "requires_grad=False) -> Tensor",
            **{name: f"{name}(*size, *, generator=None, out=None, dtype=None, layout=torch.strided, device=None, "
                     "requires_grad=False, pin_memory=False) -> Tensor" for name in ("rand", "randn")},
            "randint": "randint(low=0, high, size, \\*, generator=None, out=None, dtype=None, layout=torch.strided, "
                       "device=None, requires_grad=False) -> Tensor",
            "randperm": "randperm(n, *, generator=None, out=None, dtype=torch.int64,layout=torch.strided, "
                        "device=None, requires_grad=False, pin_memory=False) -> Tensor",
            **{name: f"{name}(start=0, end, step=1, *, out=None, dtype=None, layout=torch.strided, device=None, "
                     "requires_grad=False) -> Tensor" for name in ("arange", "range")},
            "linspace": "linspace(start, end, steps, *, out=None, dtype=None, layout=torch.strided, device=None, "
                        "requires_grad=False) -> Tensor",
            "logspace": "logspace(start, end, steps, base=10.0, *,          out=None, dtype=None, "
                        "layout=torch.strided, device=None, requires_grad=False) -> Tensor",
            "eye": "eye(n, m=None, *, out=None, dtype=None, layout=torch.strided, device=None, "
                   "requires_grad=False) -> Tensor",
            **{name: f"{name}(input, *, dtype=None, layout=None, device=None, requires_grad=False, "
                     "memory_format=torch.preserve_format) -> Tensor"
               for name in ("zeros_like", "ones_like", "empty_like")},
            "full_like": "full_like(input, fill_value, \\*, dtype=None, layout=torch.strided, device=None, "
                         "requires_grad=False, memory_format=torch.preserve_format) -> Tensor",
            **{name: f"{name}(input, *, generator=None, dtype=None, layout=None, device=None, requires_grad=False, "
                     "memory_format=torch.preserve_format) -> Tensor" for name in ("rand_like", "randn_like")},
            "randint_like": "randint_like(input, low=0, high, \\*, generator=None, dtype=None, "
                            "layout=torch.strided, device=None, requires_grad=False, "
                            "memory_format=torch.preserve_format) -> Tensor",
            "empty_strided": "empty_strided(size, stride, *, dtype=None, layout=None, device=None, "
                             "requires_grad=False, pin_memory=False) -> Tensor",
            **{name: f"{name}(row, col, offset=0, *, dtype=torch.long, device='cpu', layout=torch.strided) -> Tensor"
               for name in ("tril_indices", "triu_indices")},
            "scalar_tensor": "",  # no docstring
            "sparse_coo_tensor": "sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, "
                                 "pin_memory=False, requires_grad=False, check_invariants=None, "
                                 "is_coalesced=None) -> Tensor",
            "normal": "normal(mean, std, *, generator=None, out=None) -> Tensor",
            **{name: f"{name}(window_length, periodic=True, *, dtype=None, layout=torch.strided, device=None, "
                     "requires_grad=False) -> Tensor" for name in ("bartlett_window", "blackman_window",
                                                                   "hann_window")},
            "hamming_window": "hamming_window(window_length, *, dtype=None, layout=None, device=None, "
                              "pin_memory=False, requires_grad=False) -> Tensor",
            "kaiser_window": "kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, "
                             "layout=torch.strided, device=None, requires_grad=False) -> Tensor",
        }.items()
    }, kind="wrap"),
    Patch("cuda-parallel", "torch.nn.parallel", "DistributedDataParallel.__init__",
          "(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True, "
          "process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False, "
          "gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None, "
          "param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None, "
          "skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False, "
          "forward_sync_buffers=None)", _TORCH, "wrap", needs=("module", "device_ids", "output_device")),
    Patch("cuda-parallel", "torch.nn", "DataParallel.__init__", "(self, module, device_ids=None, output_device=None, "
          "dim=0)", _TORCH),
    Patch("gloo-backend", _C10D, "init_process_group",
          "(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None, group_name='', "
          "pg_options=None, device_id=None, _ranks=None)", _TORCH, "wrap", needs=("backend",),
          aliases=("torch.distributed",)),  # device_id is dropped where it exists (torch 1.12 has none)
    Patch("gloo-backend", _C10D, "barrier", "(group=None, async_op=False, device_ids=None, timeout=None)", _TORCH,
          "wrap", needs=("group", "device_ids"), aliases=("torch.distributed",)),
    Patch("diagnostics", "torch.utils.data.distributed", "DistributedSampler.__init__",
          "(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False)", _TORCH, "wrap"),
    *_table("smddp-limits", _C10D, _TORCH, {
        "all_reduce": "(tensor, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "reduce": "(tensor, dst=None, op=<RedOpType.SUM: 0>, group=None, async_op=False, group_dst=None)",
        "all_reduce_coalesced": "(tensors, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
    }, kind="wrap", needs=("op", "group"), aliases=("torch.distributed",)),
    *_table("smddp-limits", _C10D, _TORCH, {
        "all_to_all": "(output_tensor_list, input_tensor_list, group=None, async_op=False)",
        "all_to_all_single": "(output, input, output_split_sizes=None, input_split_sizes=None, group=None, "
                             "async_op=False)",
        "scatter": "(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None)",
        "gather": "(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None)",
        "reduce_scatter": "(output, input_list, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "reduce_scatter_tensor": "(output, input, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "send": "(tensor, dst=None, group=None, tag=0, group_dst=None)",
        "recv": "(tensor, src=None, group=None, tag=0, group_src=None)",
        "isend": "(tensor, dst=None, group=None, tag=0, group_dst=None)",
        "irecv": "(tensor, src=None, group=None, tag=0, group_src=None)",
        "gather_object": "(obj, object_gather_list=None, dst=None, group=None, group_dst=None)",
        "scatter_object_list": "(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None, "
                               "group_src=None)",
    }, kind="wrap", needs=("group",), aliases=("torch.distributed",)),
    Patch("smddp-limits", _C10D, "batch_isend_irecv", "(p2p_op_list)", _TORCH, "wrap", aliases=("torch.distributed",)),
    *_table("smddp-limits", _C10D, _TORCH, {
        "new_group": "(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False, "
                     "group_desc=None, device_id=None, sort_ranks=True)",
        "new_subgroups": "(group_size=None, group=None, timeout=None, backend=None, pg_options=None, group_desc=None)",
        "new_subgroups_by_enumeration": "(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None, "
                                        "group_desc=None)",
        "split_group": "(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, "
                       "backend=None)",
    }, kind="wrap", needs=("backend",), aliases=("torch.distributed",)),
    Patch("smddp-limits", _C10D, "barrier", "(group=None, async_op=False, device_ids=None, timeout=None)", _TORCH,
          "wrap", needs=("group", "device_ids"), aliases=("torch.distributed",)),
    Patch("smddp-limits", "torch.nn.parallel", "DistributedDataParallel.__init__",
          "(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True, "
          "process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False, "
          "gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None, "
          "param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None, "
          "skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False, "
          "forward_sync_buffers=None)", _TORCH, "wrap", needs=("process_group",)),
    Patch("smddp-limits", _C10D, "init_process_group",
          "(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None, group_name='', "
          "pg_options=None, device_id=None, _ranks=None)", _TORCH, "wrap", needs=("backend",),
          aliases=("torch.distributed",)),
    Patch("lightning-ddp", "pytorch_lightning.strategies.ddp", "DDPStrategy.determine_ddp_device_ids", "(self)",
          "pytorch-lightning 2.6", "wrap"),
    Patch("lightning-ddp", "lightning_fabric.strategies.ddp", "DDPStrategy._determine_ddp_device_ids", "(self)",
          "pytorch-lightning 2.6", "wrap"),  # lightning_fabric ships inside the pytorch-lightning distribution
    Patch("lightning-ddp", "lightning.pytorch.strategies.ddp", "DDPStrategy.determine_ddp_device_ids", "(self)",
          "lightning 2.6", "wrap"),
    Patch("lightning-ddp", "lightning.fabric.strategies.ddp", "DDPStrategy._determine_ddp_device_ids", "(self)",
          "lightning 2.6", "wrap"),
    Patch("lightning-ddp", "pytorch_lightning.plugins.training_type.ddp", "DDPPlugin.determine_ddp_device_ids",
          "(self)", "pytorch-lightning 1.5.10", "wrap"),
    Patch("lightning-ddp", "pytorch_lightning.plugins.training_type.ddp_spawn",
          "DDPSpawnPlugin.determine_ddp_device_ids", "(self)", "pytorch-lightning 1.5.10", "wrap"),
    *[Patch("short-sleeps", module, "time", "module time", "sagemaker-training 5.1.4", "wrap")
      for module in ("sagemaker_training.mpi", "sagemaker_training.smdataparallel")],
    Patch("toolkit-torch-version", "sagemaker_pytorch_container.training", "_set_torch_version_environment",
          "()", "sagemaker-pytorch-training 3.0.0", "wrap"),
    # The order is ``_sm_emulator_collectives.COLLECTIVES``' (tests/jobs/test_patch_registry.py checks both agree).
    *_table("collectives", _C10D, _TORCH, {
        "all_reduce": "(tensor, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "broadcast": "(tensor, src=None, group=None, async_op=False, group_src=None)",
        "reduce": "(tensor, dst=None, op=<RedOpType.SUM: 0>, group=None, async_op=False, group_dst=None)",
        "all_gather": "(tensor_list, tensor, group=None, async_op=False)",
        "all_gather_into_tensor": "(output_tensor, input_tensor, group=None, async_op=False)",
        "gather": "(tensor, gather_list=None, dst=None, group=None, async_op=False, group_dst=None)",
        "scatter": "(tensor, scatter_list=None, src=None, group=None, async_op=False, group_src=None)",
        "reduce_scatter": "(output, input_list, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "reduce_scatter_tensor": "(output, input, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "all_to_all": "(output_tensor_list, input_tensor_list, group=None, async_op=False)",
        "all_to_all_single": "(output, input, output_split_sizes=None, input_split_sizes=None, group=None, "
                             "async_op=False)",
        "barrier": "(group=None, async_op=False, device_ids=None, timeout=None)",
        "monitored_barrier": "(group=None, timeout=None, wait_all_ranks=False)",
        "broadcast_object_list": "(object_list, src=None, group=None, device=None, group_src=None)",
        "all_gather_object": "(object_list, obj, group=None)",
        "gather_object": "(obj, object_gather_list=None, dst=None, group=None, group_dst=None)",
        "scatter_object_list": "(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None, "
                               "group_src=None)",
        "all_reduce_coalesced": "(tensors, op=<RedOpType.SUM: 0>, group=None, async_op=False)",
        "all_gather_coalesced": "(output_tensor_lists, input_tensor_list, group=None, async_op=False)",
    }, kind="wrap", aliases=("torch.distributed",)),
    # The standard library's: "python X.Y" is the interpreter's version (no distribution to ask).
    Patch("exit-records", "multiprocessing.process", "BaseProcess._bootstrap", "(self, parent_sentinel=None)",
          "python 3.11", "wrap"),
    Patch("exit-records", "threading", "_shutdown", "()", "python 3.11", "wrap"),
])

_BY_KEY = {(p.group, p.module, p.attribute): p for p in REGISTRY}
#: Entries applied in this process (by :func:`replace`/:func:`wrap`), in order.
APPLIED: list[Patch] = []


def fingerprint(obj: Any) -> str:
    """What identifies ``obj``'s interface: a callable's parameters (names, kinds, defaults; no
    annotations), else the first docstring line of a C function (its documented signature),
    ``module NAME`` for a module, ``<missing>`` for :data:`MISSING`."""
    if obj is MISSING:
        return MISSING_FINGERPRINT
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        doc = (getattr(obj, "__doc__", None) or "").strip().splitlines() if callable(obj) else []
        return f"{type(obj).__name__}: {doc[0].strip()}" if doc else type(obj).__name__
    bare = signature.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                         for p in signature.parameters.values()],
                             return_annotation=inspect.Signature.empty)
    return re.sub(r" at 0x[0-9a-f]+", "", str(bare))


def resolve(module: Any, attribute: str) -> tuple[Any, str, Any]:
    """``(owner, name, current value or MISSING)`` of ``attribute`` (dotted) inside ``module``."""
    *path, name = attribute.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part, MISSING)
        if owner is MISSING:
            return MISSING, name, MISSING
    return owner, name, getattr(owner, name, MISSING)


def problems(patch: Patch, original: Any) -> dict[str, str]:
    """What is wrong with ``original`` as ``patch``'s target: ``{"missing"|"broken"|"changed": text}``."""
    if original is MISSING:
        return {} if patch.expected == MISSING_FINGERPRINT else {"missing": "not found"}
    found: dict[str, str] = {}
    if patch.needs:
        try:
            parameters = inspect.signature(original).parameters
        except (TypeError, ValueError):
            parameters = {}  # type: ignore[assignment]
        gone = [name for name in patch.needs if name not in parameters]
        if gone:
            found["broken"] = f"parameter(s) {', '.join(gone)} not found"
    actual = fingerprint(original)
    if actual != patch.expected:
        found["changed"] = f"expected {patch.expected}, found {actual}"
    return found


def describe(patch: Patch, found: Mapping[str, str]) -> str:
    """One line saying what changed and what happens now."""
    group = GROUPS[patch.group]
    fatal = group.critical and ("missing" in found or "broken" in found)
    if fatal:
        then = ("this process stops: without this patch a job SageMaker would reject could complete here "
                f"({group.why})")
    elif patch.kind == "wrap" and ("missing" in found or "broken" in found):
        then = "not patched"
    else:
        then = "patched anyway"
    return (f"patch {patch.target} [{patch.group}]: the target differs from {patch.pinned} "
            f"({'; '.join(found.values())}); {then}. Use the pinned version or update "
            "emulator/inhost/site/_sm_emulator_patches.py")


_REPORTED: set[str] = set()

try:  # in a host, the protocol module is top-level; in the emulator, a sibling in the package
    from _sm_emulator_protocol import ENV_DIAG_DIR, ONCE_PREFIX
except ImportError:
    from ._sm_emulator_protocol import ENV_DIAG_DIR, ONCE_PREFIX


def first_in_job(key: str) -> bool:
    """True in the first process of the job to ask for ``key`` (every host and rank asks: the
    job's diagnostics folder, shared by its hosts, holds one marker per key); True outside a job."""
    directory = os.environ.get(ENV_DIAG_DIR)
    if not directory:
        return True
    try:
        fd = os.open(os.path.join(directory, ONCE_PREFIX + key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError:  # no such folder or read-only: say it here rather than never
        return True
    os.close(fd)
    return True
_INSTALLED: dict[str, str | None] = {}


def _release(version: str) -> tuple[int, ...]:
    """``"1.12.1+cu102"`` -> (1, 12, 1)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def other_release(patch: Patch) -> str | None:
    """The installed release of ``patch``'s pinned distribution when it is another than the
    pinned one (None: the pinned release, or not installed)."""
    distribution, version = pinned_distribution(patch)
    if distribution not in _INSTALLED:
        _INSTALLED[distribution] = installed_version(distribution)
    installed = _INSTALLED[distribution]
    return installed if installed is not None and not version_matches(installed, version) else None


def _check(patch: Patch, original: Any) -> bool:
    """Report ``original``'s problems; True when the patch may be applied (see the module docstring)."""
    found = problems(patch, original)
    if not found:
        return True
    message = describe(patch, found)
    distribution, version = pinned_distribution(patch)
    other = other_release(patch) if found.keys() == {"changed"} or found.keys() == {"missing"} else None
    older = other is not None and "missing" in found and _release(other) < _release(version)
    if other is not None and ("changed" in found or older):  # expected there: one line for all
        if distribution not in _REPORTED and first_in_job(f"other-release-{distribution}"):
            _REPORTED.add(distribution)
            print(f"[emulator] {distribution} {other} is not the pinned {version}: patch targets whose "
                  f"signature differs there are patched as for {version}; those it does not have yet "
                  "are skipped", file=sys.stderr, flush=True)
        return not older  # added after that release: nothing to patch (or to add)
    if GROUPS[patch.group].critical and ("missing" in found or "broken" in found):
        replaced = torch_replacement() if distribution == "torch" else None
        if replaced is not None:
            message = (f"torch {replaced[1]} runs instead of the DLC's torch {replaced[0]}: the job's requirements.txt "
                       "replaced it (see the warning before the ranks started). The emulator's stand-ins are made for "
                       f"the DLC's torch, and on SageMaker SMDDP and the DLC's CUDA build are too; pin the requirement "
                       f"that pulled torch {replaced[1]} to keep torch {replaced[0]} (detail: {message})")
            print(f"[emulator] {message}", file=sys.stderr, flush=True)
            raise TorchReplaced(message)
        print(f"[emulator] {message}", file=sys.stderr, flush=True)
        raise PatchMismatch(message)
    if patch.target not in _REPORTED:
        _REPORTED.add(patch.target)
        print(f"[emulator] {message}", file=sys.stderr, flush=True)
    return not (patch.kind == "wrap" and ("missing" in found or "broken" in found))


def _apply(group: str, module: Any, attribute: str, make: Callable[[Any], Any], kind: str) -> bool:
    patch = _BY_KEY.get((group, module.__name__, attribute))
    if patch is None or patch.kind != kind:
        raise LookupError(f"{module.__name__}.{attribute} ({kind}) is not in the patch registry (group {group}); "
                          "add it to emulator/inhost/site/_sm_emulator_patches.py")
    owner, name, original = resolve(module, attribute)
    if not _check(patch, original) or owner is MISSING:
        return False
    new = make(original)
    setattr(owner, name, new)
    for alias in patch.aliases:
        mirror = sys.modules.get(alias)
        if mirror is not None and original is not MISSING and getattr(mirror, name, None) is original:
            setattr(mirror, name, new)
    APPLIED.append(patch)
    return True


def replace(group: str, module: Any, attribute: str, value: Any) -> bool:
    """Set ``module.attribute`` to ``value`` (a registered "replace" patch); see the module docstring."""
    return _apply(group, module, attribute, lambda _original: value, "replace")


def wrap(group: str, module: Any, attribute: str, make: Callable[[Any], Any]) -> bool:
    """Set ``module.attribute`` to ``make(original)`` (a registered "wrap" patch); False when it
    was skipped (see the module docstring)."""
    return _apply(group, module, attribute, make, "wrap")


def rebinding(original: Any, adjust: Callable[[dict[str, Any]], Callable[[Any], None] | None]) -> Any:
    """A wrapper of ``original`` that binds each call to ``original``'s own signature, lets
    ``adjust`` change the arguments by name (and return a callback for the result), then calls
    ``original`` with every argument, those it does not know about included."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        after = adjust(bound.arguments)
        result = original(*bound.args, **bound.kwargs)
        if after is not None:
            after(result)
        return result

    return wrapper


def entries(group: str, module: str | None = None) -> list[Patch]:
    """The registered patches of ``group`` (owned by ``module``, if given)."""
    return [p for p in REGISTRY if p.group == group and (module is None or p.module == module)]


# -- checks and documentation (outside hosts) ---------------------------------------------------
def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``python``: the running interpreter's), or None."""
    if distribution == PYTHON:
        return ".".join(map(str, sys.version_info[:3]))
    import importlib.metadata

    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned_distribution(patch: Patch) -> tuple[str, str]:
    name, version = patch.pinned.rsplit(" ", 1)
    return name, version


def version_matches(installed: str, pinned: str) -> bool:
    """``2.6`` matches ``2.6.6``; ``1.5.10`` matches ``1.5.10.post0+nopin``."""
    return installed == pinned or installed.startswith(pinned + ".") or installed.startswith(pinned + "+")


def check_installed(patches: Iterable[Patch] = REGISTRY) -> tuple[list[str], list[Patch], list[str]]:
    """Check every entry whose pinned distribution is installed at its pinned version against the
    unpatched module. Returns ``(problems, checked, skipped)``."""
    import importlib
    import importlib.metadata

    bad, checked, skipped = [], [], []
    for patch in patches:
        distribution, version = pinned_distribution(patch)
        installed = installed_version(distribution)
        if installed is None:
            skipped.append(f"{patch.target}: {distribution} not installed")
            continue
        if not version_matches(installed, version):
            skipped.append(f"{patch.target}: {distribution} {installed} installed, entry is for {version}")
            continue
        try:
            module = importlib.import_module(patch.module)
        except ImportError as exc:
            bad.append(f"{patch.target}: cannot import {patch.module} ({exc})")
            continue
        _owner, _name, original = resolve(module, patch.attribute)
        found = problems(patch, original)
        if found:
            bad.append(f"{patch.target}: {'; '.join(found.values())}")
        checked.append(patch)
    return bad, checked, skipped


def markdown() -> str:
    """The table of patches in ``docs/reference/patches.md``: one row per group and owning module."""
    rows = ["| module: patched attributes (pinned version) | when | why | target missing or changed |",
            "|---|---|---|---|"]
    seen: dict[tuple[str, str], list[Patch]] = {}
    for patch in REGISTRY:
        seen.setdefault((patch.group, patch.module), []).append(patch)
    for (group_name, module), patches in seen.items():
        group = GROUPS[group_name]
        names = ", ".join(f"`{p.attribute}`" for p in patches)
        pinned = ", ".join(dict.fromkeys(p.pinned for p in patches))
        kinds = {p.kind for p in patches}
        effect = ("missing or parameter gone: **the process fails**; other changes logged" if group.critical else
                  "logged; not patched" if kinds == {"wrap"} else
                  "logged; replaced anyway" if kinds == {"replace"} else
                  "logged; wrappers skipped, replacements applied")
        rows.append(f"| `{module}`: {names} ({pinned}) | {group.when} | {group.why} | {effect} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--markdown``: print the docs' patch table; ``--check``: check the installed packages."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        print(markdown(), end="")
        return 0
    if args == ["--check"]:
        bad, checked, skipped = check_installed()
        for line in skipped:
            print(f"skipped  {line}")
        for line in bad:
            print(f"MISMATCH {line}")
        print(f"{len(checked)} checked, {len(bad)} mismatched, {len(skipped)} skipped")
        return 1 if bad else 0
    print("usage: python -m emulator.inhost.patches --markdown | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
