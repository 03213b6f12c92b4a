"""The emulated ``smddp`` process-group backend: gloo with SMDDP's documented limits.

Facts (reference ``sagemaker-job-lifecycle-and-smddp.md`` Part B):

- B4 [documented]: "In v1.4.0, the library supports ``all_reduce``, ``broadcast``, ``reduce``,
  ``all_gather``, and ``barrier``." Other collectives raise here. (Newer docs say non-optimised
  collectives "fall back to NCCL"; set ``EMULATOR_SMDDP_STRICT=0`` to only log them.)
- B4 [observed]: ``all_reduce(t, op=ReduceOp.AVG)`` raises ``RuntimeError: SMDDP does not
  support: ReduceOp``. SUM is supported [inferred: DDP uses it]; every other op is treated as
  unsupported [inferred], with the same text (the real text does not name the op; the emulator
  logs which op it was).
- B5 [documented]: "The smddp backend currently does not support creating subprocess groups with
  the torch.distributed.new_group() API. You also cannot use the smddp backend concurrently with
  other process group backends such as NCCL and Gloo." The real error text is not public; ours
  quotes the documentation.
- B2 [documented]: ``barrier`` "takes ``device_ids``, which the ``smddp`` backend does not
  support".

Mechanism: ``torch.distributed.Backend.register_backend("smddp", creator)`` where the creator
returns a ``ProcessGroupGloo`` (so ``dist.get_backend()`` says ``"smddp"``, as on SageMaker, and
DDP's C++ reducer talks to gloo), plus checks wrapped around the ``torch.distributed`` Python
collectives. Not checked: collectives that C++ code issues directly (DDP's own gradient SUM
all-reduce and parameter broadcast, both supported by SMDDP).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import _sm_emulator_patches as patches
import torch.distributed as dist
from _sm_emulator_log import log as _log
from torch.distributed import distributed_c10d as c10d

NAME = "smddp"
REDUCE_OP_ERROR = "SMDDP does not support: ReduceOp"
SUBGROUP_ERROR = (
    "SMDDP: The smddp backend currently does not support creating subprocess groups with the "
    "torch.distributed.new_group() API (documented SMDDP limitation; emulated)."
)
MIXING_ERROR = (
    "SMDDP: You also cannot use the smddp backend concurrently with other process group backends "
    "such as NCCL and Gloo (documented SMDDP limitation; emulated). Asked for: {what}"
)
SUPPORTED = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "barrier")
UNSUPPORTED = (
    "all_to_all", "all_to_all_single", "scatter", "gather", "reduce_scatter",
    "reduce_scatter_tensor", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "gather_object", "scatter_object_list",
)  # fmt: skip
SUBGROUP_FUNCTIONS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")

#: The torch.distributed functions before the checks were wrapped around them (for the old API).
ORIGINALS: dict[str, Any] = {}


def strict() -> bool:
    """False when ``EMULATOR_SMDDP_STRICT=0``: undocumented collectives are logged, not refused."""
    return os.environ.get("EMULATOR_SMDDP_STRICT", "1") != "0"


def is_smddp(group: Any = None) -> bool:
    """True when ``group`` (default: the world) is an smddp group."""
    try:
        return str(c10d.get_backend(group)) == NAME
    except (ValueError, RuntimeError):
        return False


def _create(store: Any, rank: int, size: int, timeout: Any) -> Any:
    if dist.is_initialized():
        raise RuntimeError(SUBGROUP_ERROR)
    _log(f"process group backend 'smddp' runs on gloo (emulated SMDDP, rank {rank} of {size})")
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _bind(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(function).bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _check_op(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(function, args, kwargs)
        op = arguments.get("op", dist.ReduceOp.SUM)
        if is_smddp(arguments.get("group")) and op != dist.ReduceOp.SUM:
            _log(f"{name}(op={op}) under smddp: SMDDP supports ReduceOp.SUM only")
            raise RuntimeError(REDUCE_OP_ERROR)
        return function(*args, **kwargs)

    return wrapper


def _refuse(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_smddp(_bind(function, args, kwargs).get("group")):
            message = (
                f"SMDDP does not support: {name} (emulated: SMDDP v1.4.0 documents only "
                "all_reduce, broadcast, reduce, all_gather and barrier)"
            )
            if strict():
                raise RuntimeError(message)
            _log(message + "; allowed because EMULATOR_SMDDP_STRICT=0")
        return function(*args, **kwargs)

    return wrapper


def _check_barrier(function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(function, args, kwargs)
        if arguments.get("device_ids") is not None and is_smddp(arguments.get("group")):
            raise RuntimeError(
                "SMDDP does not support: barrier(device_ids=...) (documented: barrier takes "
                "device_ids, which the smddp backend does not support; emulated)"
            )
        return function(*args, **kwargs)

    return wrapper


def _check_subgroup(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_smddp(None):
            raise RuntimeError(SUBGROUP_ERROR)
        backend = _bind(function, args, kwargs).get("backend")
        if backend is not None and NAME in str(backend).lower() and dist.is_initialized():
            raise RuntimeError(MIXING_ERROR.format(what=f"{name}(backend={backend!r})"))
        return function(*args, **kwargs)

    return wrapper


def _check_init(function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        text = str(backend).lower()
        if NAME in text and ("," in text or ":" in text):
            raise RuntimeError(MIXING_ERROR.format(what=f"init_process_group(backend={backend!r})"))
        return function(backend, *args, **kwargs)

    return wrapper


def _install(name: str, wrap: Any) -> None:
    """Wrap ``c10d.name`` (and ``torch.distributed.name``) through the patch registry, whose
    ``smddp-limits`` entries are critical: a missing or changed target stops the process."""

    def make(original: Any) -> Any:
        ORIGINALS[name] = original
        return wrap(original)

    patches.wrap("smddp-limits", c10d, name, make)


def _register_backend() -> None:
    """``Backend.register_backend`` across torch versions: 2.1+ takes ``devices`` (without it,
    the backend is registered for CUDA only there); 1.12 to 2.0 take ``(name, func)``."""
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(NAME, _create)


def register() -> None:
    """Register the ``smddp`` backend and its checks (once per process)."""
    if getattr(dist, "_sm_emulator_smddp", False):
        return
    dist._sm_emulator_smddp = True
    _register_backend()
    for name in ("all_reduce", "reduce", "all_reduce_coalesced"):
        _install(name, functools.partial(_check_op, name))
    for name in UNSUPPORTED:
        _install(name, functools.partial(_refuse, name))
    for name in SUBGROUP_FUNCTIONS:
        _install(name, functools.partial(_check_subgroup, name))
    _install("barrier", _check_barrier)
    _install("init_process_group", _check_init)


__all__ = ["NAME", "ORIGINALS", "REDUCE_OP_ERROR", "SUBGROUP_ERROR", "is_smddp", "register"]
