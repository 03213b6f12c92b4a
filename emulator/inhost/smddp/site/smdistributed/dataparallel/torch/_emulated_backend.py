"""The emulated ``smddp`` process-group backend: gloo with SMDDP's documented limits.

The stand-in is SMDDP 2.5.0 (``smdistributed.dataparallel.__version__``, the latest release in
AWS's release notes, Oct 2024) and enforces what AWS documents for it today. Each check, and its
source (AWS developer guide pages under https://docs.aws.amazon.com/sagemaker/latest/dg/):

Refused (``RuntimeError``), because documented or observed:

- ``all_reduce(t, op=ReduceOp.AVG)``: ``RuntimeError: SMDDP does not support: ReduceOp``
  [observed: aws/amazon-sagemaker-examples#3967; Lightning-AI/pytorch-lightning#20409, PyTorch 2.2
  DLC, whose ``FailureReason`` carries that text]. The real text names no op.
- ``barrier(device_ids=...)``: "torch.distributed.barrier takes device_ids, which the smddp backend
  does not support" [documented: SMDDP 1.4.0 release notes, never withdrawn].
- In a PyTorch DDP job, sub-groups (``new_group`` and friends) and other backends next to
  ``smddp``: "(For PyTorch DDP jobs only) The smddp backend currently does not support creating
  subprocess groups with the torch.distributed.new_group() API. You also cannot use the smddp
  backend concurrently with other process group backends such as NCCL and Gloo."
  [documented: data-parallel-modify-sdp-pt.html]. A process is a DDP job once it wraps a model in
  ``DistributedDataParallel`` on the smddp group: a sub-group or another backend created before
  that fails at the DDP constructor, one created after fails at once. The real error text and
  the point where the real library fails are not public; ours quotes the documentation.

Logged (``[emulator] rank R: smddp warning: …`` in the host's log, collected into the job's
warnings) and allowed, unless strict (``EMULATOR_SMDDP_STRICT=1``, the request's
``smddp_strict``), which refuses them:

- other reduce ops than SUM (MIN, MAX, PRODUCT, …) in ``all_reduce``/``reduce``/
  ``all_reduce_coalesced``, and AVG outside ``all_reduce`` [inferred from the observed AVG
  failure, whose text names no op; nothing public says they work or fail];
- collectives other than SMDDP's own: the library implements ``AllReduce`` and ``AllGather``
  (data-parallel-intro.html) and serves DDP, FSDP and DeepSpeed (data-parallel-modify-sdp-pt.html;
  "It supports any training frameworks such as SageMaker Model Parallelism Library, PyTorch FSDP,
  and DeepSpeed", model-parallel-core-features-v2-smddp-allgather.html), falling back to NCCL for
  the other collectives [documented, SMP sharded data parallelism page]. SMDDP 1.4.0 documented
  only ``all_reduce``, ``broadcast``, ``reduce``, ``all_gather`` and ``barrier`` (archived
  data-parallel-modify-sdp-pt.md): strict refuses the rest, as that version would;
- sub-groups and other backends in a process that has no DDP model (yet): documented for DDP jobs
  only, so FSDP and DeepSpeed jobs may create them.

Mechanism: ``torch.distributed.Backend.register_backend("smddp", creator)`` where the creator
returns a ``ProcessGroupGloo`` (so ``dist.get_backend()`` says ``"smddp"``, as on SageMaker, and
DDP's C++ reducer talks to gloo), plus checks wrapped around the ``torch.distributed`` Python
collectives and the DDP constructor, all through the patch registry (group ``smddp-limits``,
critical). Not checked: collectives that C++ code issues directly (DDP's own gradient SUM
all-reduce and parameter broadcast, both supported by SMDDP).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, ClassVar

import _sm_emulator_patches as patches
import torch.distributed as dist
from _sm_emulator_log import log as _log
from _sm_emulator_log import log_once
from _sm_emulator_protocol import ENV_SMDDP_STRICT
from torch.distributed import distributed_c10d as c10d

NAME = "smddp"
REDUCE_OP_ERROR = "SMDDP does not support: ReduceOp"
SUBGROUP_ERROR = (
    "SMDDP: (For PyTorch DDP jobs only) The smddp backend currently does not support creating "
    "subprocess groups with the torch.distributed.new_group() API (documented SMDDP limitation; emulated). "
    "Created: {what}"
)
MIXING_ERROR = (
    "SMDDP: You also cannot use the smddp backend concurrently with other process group backends "
    "such as NCCL and Gloo (documented SMDDP limitation for PyTorch DDP jobs; emulated). Asked for: {what}"
)
BARRIER_ERROR = (
    "SMDDP does not support: barrier(device_ids=...) (documented: barrier takes device_ids, which the "
    "smddp backend does not support; emulated)"
)
#: What a warning line starts with (``emulator/diagnostics/smddp_report.py`` collects these lines from host logs).
WARNING = "smddp warning: "
#: SMDDP's own (optimised) collectives; everything else falls back to NCCL in SMDDP 2.x.
OPTIMISED = ("all_reduce", "all_gather", "all_gather_into_tensor")
#: What SMDDP 1.4.0 documented for the ``smddp`` backend (strict refuses the others).
SUPPORTED_1_4 = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "barrier")
OTHER_COLLECTIVES = (
    "all_to_all", "all_to_all_single", "scatter", "gather", "reduce_scatter",
    "reduce_scatter_tensor", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "gather_object", "scatter_object_list",
)  # fmt: skip
SUBGROUP_FUNCTIONS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")
#: The functions whose ``op`` is checked.
REDUCING = ("all_reduce", "reduce", "all_reduce_coalesced")

#: The torch.distributed functions before the checks were wrapped around them (for the old API).
ORIGINALS: dict[str, Any] = {}


class _Job:
    """What this process did that the DDP-only limits depend on."""

    ddp = False  # a DistributedDataParallel model on the smddp group exists
    in_subgroup_call = 0  # inside a wrapped new_group & co. (which checked already)
    #: Sub-groups or other backends created next to smddp before any DDP model (their description).
    pending: ClassVar[list[str]] = []


def strict() -> bool:
    """True when ``EMULATOR_SMDDP_STRICT=1``: inferred limits are refused, not only logged."""
    return os.environ.get(ENV_SMDDP_STRICT) == "1"


def is_smddp(group: Any = None) -> bool:
    """True when ``group`` (default: the world) is an smddp group."""
    try:
        return str(c10d.get_backend(group)) == NAME
    except (ValueError, RuntimeError):
        return False


def _inferred(key: str, message: str, error: str) -> None:
    """An inferred limit: raise ``error`` when strict, else log ``message`` once per process."""
    if strict():
        _log(f"{message}; refused because smddp_strict is on")
        raise RuntimeError(error)
    log_once(key, f"{WARNING}{message}; allowed (smddp_strict refuses it)")


def _create(store: Any, rank: int, size: int, timeout: Any) -> Any:
    if dist.is_initialized():  # a second smddp group (DeviceMesh and other unwrapped callers)
        if not _Job.in_subgroup_call:
            _next_to_smddp("subgroup", "a second smddp process group", SUBGROUP_ERROR)
    else:
        _log(f"process group backend 'smddp' runs on gloo (emulated SMDDP 2.5.0, rank {rank} of {size})")
    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _bind(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    bound = inspect.signature(function).bind_partial(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _op_name(op: Any) -> str:
    return str(getattr(op, "name", op)).rsplit(".", 1)[-1]


def _check_op(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(function, args, kwargs)
        op = arguments.get("op", dist.ReduceOp.SUM)
        if op != dist.ReduceOp.SUM and is_smddp(arguments.get("group")):
            if name == "all_reduce" and op == dist.ReduceOp.AVG:  # observed
                _log("all_reduce(op=AVG) under smddp: SMDDP refuses it (observed); the real message names no op")
                raise RuntimeError(REDUCE_OP_ERROR)
            _inferred(f"op-{name}-{_op_name(op)}",
                      f"{name}(op={_op_name(op)}) under smddp: only SUM is known to work (AVG is observed to fail "
                      "in all_reduce; other ops are not documented)", REDUCE_OP_ERROR)
        return function(*args, **kwargs)

    return wrapper


def _check_collective(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(function, args, kwargs)
        group = arguments.get("group")
        if name == "batch_isend_irecv":
            ops = arguments.get("p2p_op_list") or []
            group = getattr(ops[0], "group", None) if ops else None
        if is_smddp(group):
            _inferred(f"collective-{name}",
                      f"{name} under smddp is not one of SMDDP's own collectives (AllReduce, AllGather): SMDDP 2.x "
                      "falls back to NCCL for it (documented); SMDDP 1.4.0 documented only all_reduce, broadcast, "
                      "reduce, all_gather and barrier",
                      f"SMDDP does not support: {name} (emulated, smddp_strict: SMDDP v1.4.0 documents only "
                      "all_reduce, broadcast, reduce, all_gather and barrier)")
        return function(*args, **kwargs)

    return wrapper


def _check_barrier(function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        arguments = _bind(function, args, kwargs)
        if arguments.get("device_ids") is not None and is_smddp(arguments.get("group")):
            raise RuntimeError(BARRIER_ERROR)
        return function(*args, **kwargs)

    return wrapper


def _next_to_smddp(kind: str, what: str, error: str) -> None:
    """A sub-group or another backend next to smddp: refused in a DDP job (documented), else
    remembered for the DDP constructor and logged (or refused when strict)."""
    text = error.format(what=what)
    if _Job.ddp:
        raise RuntimeError(text)
    _inferred(f"{kind}-{what}", f"{what} next to smddp: refused in PyTorch DDP jobs (documented); this process "
              "has no DDP model yet, so it fails if it wraps one (FSDP and DeepSpeed jobs may do this)", text)
    _Job.pending.append(text)


def _check_subgroup(name: str, function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        backend = _bind(function, args, kwargs).get("backend")
        if is_smddp(None):
            other = backend is not None and NAME not in str(backend).lower()
            _next_to_smddp("mixing" if other else "subgroup", f"{name}(backend={backend!r})",
                           MIXING_ERROR if other else SUBGROUP_ERROR)
        elif backend is not None and NAME in str(backend).lower() and dist.is_initialized():
            _next_to_smddp("mixing", f"{name}(backend={backend!r}) next to a {c10d.get_backend()} world",
                           MIXING_ERROR)
        _Job.in_subgroup_call += 1
        try:
            return function(*args, **kwargs)
        finally:
            _Job.in_subgroup_call -= 1

    return wrapper


def _check_init(function: Any) -> Any:
    @functools.wraps(function)
    def wrapper(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        text = str(backend).lower()
        if NAME in text and ("," in text or ":" in text):
            _next_to_smddp("mixing", f"init_process_group(backend={backend!r})", MIXING_ERROR)
        return function(backend, *args, **kwargs)

    return wrapper


def _check_ddp(function: Any) -> Any:
    @functools.wraps(function)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if is_smddp(_bind(function, (self, *args), kwargs).get("process_group")):
            _Job.ddp = True
            if _Job.pending:
                raise RuntimeError(_Job.pending[0])
        function(self, *args, **kwargs)

    return __init__


def _install(name: str, wrap: Any, module: Any = c10d) -> None:
    """Wrap ``module.name`` (and its aliases) through the patch registry, whose ``smddp-limits``
    entries are critical: a missing or changed target stops the process."""

    def make(original: Any) -> Any:
        ORIGINALS[name] = original
        return wrap(original)

    patches.wrap("smddp-limits", module, name, make)


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
    import torch.nn.parallel

    for name in REDUCING:
        _install(name, functools.partial(_check_op, name))
    for name in OTHER_COLLECTIVES:
        _install(name, functools.partial(_check_collective, name))
    for name in SUBGROUP_FUNCTIONS:
        _install(name, functools.partial(_check_subgroup, name))
    _install("barrier", _check_barrier)
    _install("init_process_group", _check_init)
    _install("DistributedDataParallel.__init__", _check_ddp, torch.nn.parallel)


__all__ = ["NAME", "ORIGINALS", "REDUCE_OP_ERROR", "SUBGROUP_ERROR", "is_smddp", "register"]
