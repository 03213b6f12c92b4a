"""Collective records, rank side: every ``torch.distributed`` collective a process issues.

Applied right after ``import torch`` (``_sm_emulator_hooks``) when ``EMULATOR_DIAG_DIR`` is set
and ``EMULATOR_COLLECTIVES`` is not ``0``. Each collective function of ``torch.distributed``
(:data:`COLLECTIVES`) is wrapped; a call records, before it runs, one fixed-size record in a ring
file mapped into memory (``coll-<host>-<pid>.bin``, layout in ``_sm_emulator_protocol``
``COLL_*``): the per-process-group sequence number, the op, a signature (dtypes and shapes of the
tensors, reduce op, src/dst; crc32 of it for comparison), the caller's ``file:line in function``
and the time; when the call returns its state and end time are updated. The ring keeps the last
``COLL_CAPACITY`` records; it is ``MAP_SHARED``, so what a rank wrote survives its SIGKILL. A JSON
side file (``coll-<host>-<pid>.json``) names the rank, world size, groups and ops; it is rewritten
only when a new group or op appears. The emulator compares the rings after a failed or stopped
job (``emulator.diagnostics.collectives``).

Works for any backend the Python API reaches (gloo, nccl run on gloo, the ``smddp`` stand-in and
its pre-1.4 API, which calls these functions). Only the outermost call is recorded (object
collectives call ``broadcast``/``all_gather`` inside). Not recorded: collectives C++ issues
without the Python API (DDP's gradient all-reduce buckets and its start-up parameter broadcast,
which are the same on every rank by construction), point-to-point ``send``/``recv``, and the
functional collectives of ``torch.distributed._functional_collectives`` (torch.compile).
A failure inside the recorder never reaches the training script: recording just stops.
"""

from __future__ import annotations

import functools
import inspect
import json
import mmap
import os
import struct
import sys
import threading
import time
import zlib
from typing import Any

from _sm_emulator_protocol import (
    COLL_CAPACITY,
    COLL_HEADER,
    COLL_ISSUED,
    COLL_MAGIC,
    COLL_RAISED,
    COLL_RECORD,
    COLL_RETURNED,
    COLLECTIVES_PREFIX,
    ENV_COLLECTIVES,
    ENV_DIAG_DIR,
    INHOST_SMDDP_SITE,
)

#: The ``torch.distributed`` functions recorded (those a torch version lacks are skipped).
COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "broadcast_object_list", "all_gather_object",
    "gather_object", "scatter_object_list", "all_reduce_coalesced", "all_gather_coalesced",
)  # fmt: skip
#: Arguments that do not take part in the signature (placement, waiting, objects' contents).
_SKIP = frozenset(("group", "async_op", "device_ids", "device", "timeout", "wait_all_ranks", "obj",
                   "group_src", "group_dst"))
_HEADER_SIZE = struct.calcsize(COLL_HEADER)
_RECORD = struct.Struct(COLL_RECORD)
_STATE_OFFSET = 7  # seq u32, group u16, op u8 → state u8
_DONE_OFFSET = 24  # ... crc u32, pad 4, t_issue f64 → t_done f64
_COUNT = struct.Struct("<Q")
_COUNT_OFFSET = 16


def enabled() -> bool:
    """True when records are wanted (``EMULATOR_DIAG_DIR`` set, ``EMULATOR_COLLECTIVES`` not 0)."""
    return bool(os.environ.get(ENV_DIAG_DIR)) and os.environ.get(ENV_COLLECTIVES, "1") != "0"


class _Ring:
    """This process's ring file and side file."""

    def __init__(self, dist: Any) -> None:
        self.dist = dist
        self.pid = os.getpid()
        base = os.path.join(os.environ[ENV_DIAG_DIR], f"{COLLECTIVES_PREFIX}{os.uname().nodename}-{self.pid}")
        self.side_path = base + ".json"
        size = _HEADER_SIZE + COLL_CAPACITY * _RECORD.size
        fd = os.open(base + ".bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        struct.pack_into(COLL_HEADER, self.map, 0, COLL_MAGIC, 1, _RECORD.size, COLL_CAPACITY, 0, self.pid)
        self.count = 0
        self.groups: dict[int, tuple[int, list[int]]] = {}  # id(group) or -1 (world) -> (index, [seq])
        self.group_info: list[dict[str, Any]] = []
        self.ops: dict[str, int] = {}
        self.created = time.time()
        self.rank = dist.get_rank() if dist.is_initialized() else None
        self.world = dist.get_world_size() if dist.is_initialized() else None
        self.backend = str(dist.get_backend()) if dist.is_initialized() else None

    def _write_side(self) -> None:
        side = {"host": os.uname().nodename, "pid": self.pid, "rank": self.rank, "world_size": self.world,
                "backend": self.backend, "created": self.created, "groups": self.group_info,
                "ops": list(self.ops), "capacity": COLL_CAPACITY,
                "env_rank": os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")}
        tmp = self.side_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(side, f)
        os.replace(tmp, self.side_path)

    def group(self, group: Any) -> tuple[int, list[int]]:
        dist, c10d = self.dist, self.dist.distributed_c10d
        world = group is None or group is c10d.GroupMember.WORLD
        key = -1 if world else id(group)
        found = self.groups.get(key)
        if found is not None:
            return found
        try:
            ranks = list(range(dist.get_world_size())) if world else list(c10d.get_process_group_ranks(group))
        except Exception:
            ranks = []
        if world:
            name = "default"
        else:
            name = str(getattr(group, "group_name", "") or getattr(c10d, "_get_process_group_name", str)(group))
        found = (len(self.group_info), [0])
        self.group_info.append({"name": name, "ranks": ranks, "desc": getattr(group, "group_desc", None)})
        self.groups[key] = found
        self._write_side()
        return found

    def op(self, name: str) -> int:
        index = self.ops.get(name)
        if index is None:
            index = self.ops[name] = len(self.ops)
            self._write_side()
        return index

    def record(self, name: str, group: Any, signature: str, where: bytes) -> int:
        index, seq = self.group(group)
        seq[0] += 1
        op = self.ops.get(name)
        if op is None:
            op = self.op(name)
        offset = _HEADER_SIZE + (self.count % COLL_CAPACITY) * _RECORD.size
        sig, crc = _encoded(signature)
        _RECORD.pack_into(self.map, offset, seq[0], index, op, COLL_ISSUED, crc, time.time(), 0.0, sig, where)
        self.count += 1
        _COUNT.pack_into(self.map, _COUNT_OFFSET, self.count)
        return offset

    def done(self, offset: int, ok: bool) -> None:
        self.map[offset + _STATE_OFFSET] = COLL_RETURNED if ok else COLL_RAISED
        struct.pack_into("<d", self.map, offset + _DONE_OFFSET, time.time())


_STATE: dict[str, Any] = {"ring": None, "broken": False}
_LOCAL = threading.local()


def _reset_after_fork() -> None:  # a forked child (DataLoader worker) gets its own ring if it needs one
    _STATE["ring"] = None


def _ring(dist: Any) -> _Ring | None:
    ring = _STATE["ring"]
    if ring is None and not _STATE["broken"]:
        try:
            ring = _STATE["ring"] = _Ring(dist)
        except Exception:
            _STATE["broken"] = True
    return ring


#: Memos (bounded): what was computed once for a dtype/shape, a reduce op, a signature, a call site.
_MEMO: dict[Any, Any] = {}
_MEMO_LIMIT = 4096


def _remember(key: Any, value: Any) -> Any:
    if len(_MEMO) >= _MEMO_LIMIT:
        _MEMO.clear()
    _MEMO[key] = value
    return value


def _memo(key: Any, make: Any) -> Any:
    try:
        return _MEMO[key]
    except KeyError:
        return _remember(key, make())
    except TypeError:  # unhashable key
        return make()


_PLAIN = frozenset((int, bool, str, float, type(None)))


def _describe(value: Any, tensor: type) -> str:
    """Short text for an argument: ``float32[8]``, ``4xfloat32[8]``, ``SUM``, ``0``."""
    cls = type(value)
    if cls is tensor or (cls not in _PLAIN and cls is not list and isinstance(value, tensor)):
        key = (value.dtype, value.shape)
        text = _MEMO.get(key)
        if text is None:
            text = _remember(key, f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}")
        return text  # type: ignore[no-any-return]
    if cls in _PLAIN:
        return repr(value)
    if cls is list or cls is tuple:
        if value and all(isinstance(v, tensor) for v in value):
            parts = [_describe(v, tensor) for v in value]
            return f"{len(parts)}x{parts[0]}" if len(set(parts)) == 1 else "[" + ",".join(parts) + "]"
        return f"list[{len(value)}]"
    return _memo(("op", value), lambda: _name(value))  # type: ignore[no-any-return]


def _name(value: Any) -> str:
    name = getattr(value, "name", None)
    return str(name) if isinstance(name, str) else type(value).__name__


def _encoded(signature: str) -> tuple[bytes, int]:
    """(first 48 bytes, crc32 of all) of a signature."""
    def make() -> tuple[bytes, int]:
        raw = signature.encode(errors="replace")
        return raw[:48], zlib.crc32(raw)

    return _memo(("sig", signature), make)  # type: ignore[no-any-return]


_HERE = os.path.dirname(os.path.abspath(__file__))
#: torch.distributed, this folder and the smddp stand-in's (its wrappers are not the user's frames).
_PASS_THROUGH = (os.sep + os.path.join("torch", "distributed") + os.sep, _HERE + os.sep,
                 os.path.join(os.path.dirname(_HERE), *INHOST_SMDDP_SITE.split("/")) + os.sep)


def _passes_through(code: Any) -> bool:
    return _memo(("skip", code), lambda: any(part in code.co_filename for part in _PASS_THROUGH))  # type: ignore[no-any-return]


def _caller() -> bytes:
    """``file:line in function`` (first 48 bytes) of the first frame outside torch.distributed and
    the in-host code."""
    frame = sys._getframe(2)
    while frame.f_back is not None and _passes_through(frame.f_code):
        frame = frame.f_back
    code = frame.f_code
    return _memo((code, frame.f_lineno), lambda: (
        f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}".encode(errors="replace")[:48]))


def _wrap(name: str, function: Any, torch: Any) -> Any:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return function
    params = [p for p in parameters if p not in ("args", "kwargs")]
    # defaults filled in, so all_reduce(t) and all_reduce(t, op=SUM) have one signature
    defaults = {k: p.default for k, p in parameters.items()
                if k not in _SKIP and p.default is not inspect.Parameter.empty}
    shown = [k for k in params if k not in _SKIP]
    group_pos = params.index("group") if "group" in params else None
    dist = torch.distributed
    tensor = torch.Tensor

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if getattr(_LOCAL, "depth", 0) or _STATE["broken"]:
            return function(*args, **kwargs)
        ring = _ring(dist)
        offset = None
        if ring is not None:
            try:
                group = kwargs.get("group")
                if group is None and group_pos is not None and len(args) > group_pos:
                    group = args[group_pos]
                named = dict(defaults)
                named.update(zip(params, args))
                named.update(kwargs)
                signature = " ".join([f"{k}={_describe(named[k], tensor)}" for k in shown if k in named])
                offset = ring.record(name, group, signature, _caller())
            except Exception:
                _STATE["broken"] = True
        _LOCAL.depth = 1
        ok = False
        try:
            result = function(*args, **kwargs)
            ok = True
            return result
        finally:
            _LOCAL.depth = 0
            if offset is not None and ring is not None:
                try:
                    ring.done(offset, ok)
                except Exception:
                    _STATE["broken"] = True

    wrapper._sm_emulator_recorded = True  # type: ignore[attr-defined]
    return wrapper


def patch(torch: Any) -> None:
    """Wrap ``torch.distributed``'s collectives (once per process; called after ``import torch``)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not enabled() or not dist.is_available() or getattr(dist, "_sm_emulator_collectives", False):
        return
    dist._sm_emulator_collectives = True
    c10d = dist.distributed_c10d
    from _sm_emulator_patches import wrap

    for name in COLLECTIVES:  # registry entries of group "collectives" (aliased in torch.distributed)
        if getattr(getattr(c10d, name, None), "_sm_emulator_recorded", False):
            continue
        wrap("collectives", c10d, name, functools.partial(_wrap, name, torch=torch))
    os.register_at_fork(after_in_child=_reset_after_fork)


__all__ = ["COLLECTIVES", "enabled", "patch"]
