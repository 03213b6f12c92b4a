"""Stand-in for SMDDP's pre-1.4 API ``smdistributed.dataparallel.torch.distributed``.

Documented behaviour (reference B3): ``init_process_group()`` takes no required arguments;
``get_world_size()`` is the number of GPUs in the cluster, ``get_rank()`` the global process rank
[inferred from every example], ``get_local_rank()`` the GPU index on the node; collectives
``all_reduce`` (ops AVERAGE, SUM, MIN, MAX), ``broadcast``, ``all_gather``, ``all_to_all_single``,
``barrier``; every ``group`` argument accepts only ``group.WORLD``. Importing the module prints the
1.4+ deprecation notice (B3, documented).

Emulated on the ``smddp`` stand-in backend (gloo). Not emulated: the library's own all-reduce
("~2X slower" than DDP, per the docs), the odd documented size rule of ``broadcast``.
"""

from __future__ import annotations

import enum
import os
import sys
from typing import Any

import torch
import torch.distributed as _dist

from smdistributed.dataparallel.torch import _emulated_backend

print(
    "smdistributed.dataparallel.torch.dist is deprecated in the SageMaker distributed data "
    "parallel library v1.4.0+.\nPlease use torch.distributed and specify 'smddp' as a backend when "
    "initializing process group as follows:\ntorch.distributed.init_process_group(backend='smddp')"
    "\nFor more information, see the library's API documentation at\n"
    "https://docs.aws.amazon.com/sagemaker/latest/dg/data-parallel-modify-sdp-pt.html",
    file=sys.stderr,
    flush=True,
)

GROUP_ERROR = (
    "Process group is not supported in smdistributed.dataparallel. Only supported value is "
    "smdistributed.dataparallel.torch.distributed.group.WORLD"
)


class ReduceOp(enum.Enum):
    """SMDDP's own reduce ops (note ``AVERAGE``, not torch's ``AVG``)."""

    AVERAGE = "average"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


class _Group:
    """``group.WORLD``: the only group the old API accepts."""

    WORLD = "smdistributed.dataparallel.torch.distributed.group.WORLD"


group = _Group


class _DoneWork:
    """A finished asynchronous operation (returned for ``AVERAGE`` with ``async_op=True``)."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _check_group(value: Any) -> None:
    if value is not None and value != group.WORLD:
        raise RuntimeError(GROUP_ERROR)


def _env_int(*names: str, default: int | None = None) -> int:
    for name in names:
        if os.environ.get(name):
            return int(os.environ[name])
    if default is None:
        raise RuntimeError(
            f"smdistributed.dataparallel: none of {', '.join(names)} is set; start the script "
            "with mpirun + smddprun (SageMaker's smdistributed dataparallel launcher)"
        )
    return default


def is_available() -> bool:
    """True if started as a distributed job (mpirun/smddprun set the rank variables)."""
    return "RANK" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ


def init_process_group(*args: Any, **kwargs: Any) -> None:
    """Initialise the ``smddp`` group from the launcher's environment; arguments are ignored."""
    _emulated_backend.register()
    os.environ.setdefault("MASTER_ADDR", os.environ.get("SMDATAPARALLEL_SERVER_ADDR", "localhost"))
    os.environ.setdefault("MASTER_PORT", os.environ.get("SMDATAPARALLEL_SERVER_PORT", "7592"))
    _dist.init_process_group(
        backend=_emulated_backend.NAME,
        rank=_env_int("RANK", "OMPI_COMM_WORLD_RANK"),
        world_size=_env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
    )


def is_initialized() -> bool:
    """True after :func:`init_process_group`."""
    return _dist.is_initialized()


def get_world_size(group: Any = group.WORLD) -> int:
    """Total number of (emulated) GPUs across all nodes."""
    _check_group(group)
    return _dist.get_world_size()


def get_rank(group: Any = group.WORLD) -> int:
    """Global rank of this process."""
    _check_group(group)
    return _dist.get_rank()


def get_local_rank() -> int:
    """Index of this process's GPU on its node."""
    return _env_int("LOCAL_RANK", "SMDATAPARALLEL_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", default=0)


def _call(name: str, *args: Any, **kwargs: Any) -> Any:
    return _emulated_backend.ORIGINALS.get(name, getattr(_dist, name))(*args, **kwargs)


def all_reduce(
    tensor: torch.Tensor,
    op: ReduceOp = ReduceOp.SUM,
    group: Any = group.WORLD,
    async_op: bool = False,
) -> Any:
    """In-place all-reduce with one of SMDDP's ops (AVERAGE = SUM, then divide)."""
    _check_group(group)
    if not isinstance(op, ReduceOp):
        raise RuntimeError(_emulated_backend.REDUCE_OP_ERROR)
    if op is ReduceOp.AVERAGE:
        _call("all_reduce", tensor, op=_dist.ReduceOp.SUM)
        if tensor.is_floating_point() or tensor.is_complex():
            tensor.div_(_dist.get_world_size())
        else:
            tensor.floor_divide_(_dist.get_world_size())
        return _DoneWork() if async_op else None
    torch_op = {ReduceOp.SUM: _dist.ReduceOp.SUM, ReduceOp.MIN: _dist.ReduceOp.MIN}.get(op, _dist.ReduceOp.MAX)
    return _call("all_reduce", tensor, op=torch_op, async_op=async_op)


def broadcast(tensor: torch.Tensor, src: int = 0, group: Any = group.WORLD, async_op: bool = False) -> Any:
    """In-place broadcast from ``src``."""
    _check_group(group)
    return _call("broadcast", tensor, src=src, async_op=async_op)


def all_gather(
    tensor_list: list[torch.Tensor],
    tensor: torch.Tensor,
    group: Any = group.WORLD,
    async_op: bool = False,
) -> Any:
    """Gather ``tensor`` from every rank into ``tensor_list``."""
    _check_group(group)
    return _call("all_gather", tensor_list, tensor, async_op=async_op)


def all_to_all_single(
    output_t: torch.Tensor,
    input_t: torch.Tensor,
    output_split_sizes: list[int] | None = None,
    input_split_sizes: list[int] | None = None,
    group: Any = group.WORLD,
    async_op: bool = False,
) -> Any:
    """All-to-all on single tensors (allowed in the old API)."""
    _check_group(group)
    return _call(
        "all_to_all_single", output_t, input_t, output_split_sizes, input_split_sizes,
        async_op=async_op,
    )  # fmt: skip


def barrier(group: Any = group.WORLD, async_op: bool = False) -> Any:
    """Wait for every rank."""
    _check_group(group)
    return _call("barrier", async_op=async_op)
