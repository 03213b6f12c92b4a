"""Exit-time teardown of emulated ``nccl``/``smddp`` process groups.

What is emulated: on GPUs a script that never calls ``dist.destroy_process_group()`` exits
cleanly, ProcessGroupNCCL's destructor aborting its communicators and printing, on the first rank
of each node (``rank % local GPU count == 0``), once per process::

    Warning: WARNING: destroy_process_group() was not called before program exit, which can leak
    resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown

(``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``, ``~ProcessGroupNCCL``; not in a CPU build of
torch, whose ``libtorch`` has no NCCL). Here the group underneath is gloo, whose teardown at exit
can abort: a gloo worker thread (``ProcessGroupGloo::runLoop``) drops the last reference to a
finished ``AsyncWork`` whose tensors own a Python object; the decref takes the GIL, which on a
finalising interpreter (CPython 3.11 ``take_gil``) calls ``pthread_exit``; its forced unwind hits
the implicitly ``noexcept`` ``~AsyncWork`` and libstdc++ calls ``std::terminate`` ("terminate called
without an active exception", SIGABRT). Upstream: pytorch/pytorch#190489 (open), the abandoned
atexit fix pytorch/pytorch#179291, and #65231/#65513 (a Gloo destructor not run before exit).

So when the default process group was created by a translated ``init_process_group`` (the
script asked for ``nccl``, ``cuda:nccl,...`` or ``smddp``), an ``atexit`` handler registered at
that moment (it runs before the interpreter finalises, and before handlers registered earlier:
mpi4py's ``MPI_Finalize``) prints torch's warning as above (``nccl`` only: SMDDP's own text is not
public, none is invented) and calls ``destroy_process_group()``, then releases the GIL briefly so
that a worker thread still holding a finished work can drop it while the interpreter is alive.

Not emulated: a group the script itself created as ``gloo`` keeps gloo's behaviour (torch's, on a
CPU instance too); sub-groups created with ``new_group`` are destroyed with the default group; a
script that ends with ``os._exit`` runs no handler (as on GPUs, nothing is torn down); the
warning's ``ProcessGroupNCCL.cpp:<line>`` (the line differs between releases) is left out.
"""

from __future__ import annotations

import atexit
import datetime
import sys
import time
from typing import Any

from _sm_emulator_log import log_once

#: torch's text (``TORCH_WARN_ONCE`` in ``~ProcessGroupNCCL``), printed as c10's warning handler does.
NCCL_NOT_DESTROYED = ("WARNING: destroy_process_group() was not called before program exit, which can leak "
                      "resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown")
#: How long the handler releases the GIL after destroying the group, for a worker thread that
#: still holds a finished work (it needs the GIL for one decref).
GIL_RELEASE_SECONDS = 0.05

_TRACKED: dict[int, str] = {}  # id(default process group) -> the backend the script asked for
_REGISTERED = [False]


def translated(requested: Any, used: Any) -> str | None:
    """The backend the script asked for when the emulator runs it on gloo (``nccl`` or ``smddp``), else None."""
    text = str(requested).lower() if requested is not None else ""
    if text == "smddp":
        return "smddp"
    if "nccl" in text and used != requested:
        return "nccl"
    return None


def track(dist: Any, asked: str, gpu_count: int) -> None:
    """Remember the default group just created for ``asked`` and register the exit handler once."""
    try:
        pg = dist.distributed_c10d._get_default_group()
    except Exception:  # pragma: no cover - torch without a default group after init
        return
    _TRACKED[id(pg)] = asked
    if not _REGISTERED[0]:
        _REGISTERED[0] = True
        atexit.register(teardown, dist, gpu_count)


def warning_line(rank: int) -> str:
    """The line c10's default warning handler writes for the NCCL warning (without its source line)."""
    now = datetime.datetime.now()
    return (f"[rank{rank}]:[W{now:%m%d} {now:%H:%M:%S}.{now.microsecond * 1000:09d} ProcessGroupNCCL.cpp] "
            f"Warning: {NCCL_NOT_DESTROYED} (function operator())")


def teardown(dist: Any, gpu_count: int) -> None:
    """At exit: destroy the default group when it is one of ours (see the module docstring)."""
    try:
        if dist.is_initialized():
            pg = dist.distributed_c10d._get_default_group()
            asked = _TRACKED.get(id(pg))
            if asked is None:  # the script destroyed ours and created a gloo group itself
                return
            rank = dist.get_rank()
            if asked == "nccl" and rank % max(1, gpu_count) == 0:
                print(warning_line(rank), file=sys.stderr, flush=True)
            del pg
            _drain()  # before the group's destructor, which joins its workers holding the GIL
            dist.destroy_process_group()
        # Also when the script destroyed ours itself: gloo groups that objects still reference
        # (FSDP's and DCP's device meshes, sub-groups) live on, and their worker threads may still
        # drop a finished work; let them do so while the interpreter is alive.
        _drain()
    except Exception as exc:  # never turn a clean exit into a failure
        log_once("teardown", f"exit-time teardown of the emulated process group failed: {exc!r}")


def _drain() -> None:
    """Release the GIL for :data:`GIL_RELEASE_SECONDS` after a collection, so that a gloo worker
    thread holding a finished work whose tensors own a Python object can drop it now. Before
    ``destroy_process_group`` too: ``~ProcessGroupGloo`` joins its worker threads from the
    thread that drops the group, which holds the GIL throughout, so a worker that needs the GIL
    for that last decref then waits forever, and so does the rank (seen with torch 2.5.1: the
    Hugging Face Trainer's first rank of each node hung at exit after its last all_gather)."""
    import gc

    gc.collect()
    time.sleep(GIL_RELEASE_SECONDS)


__all__ = ["NCCL_NOT_DESTROYED", "teardown", "track", "translated", "warning_line"]
