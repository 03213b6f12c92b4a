"""Rank diagnostics, rank side: one small JSON file per process in ``EMULATOR_DIAG_DIR``.

``<hostname>-<pid>.json`` holds ``{"host", "pid", "process_groups": [...], "samplers": [...]}``;
a record is added each time the process initialises a default process group or creates a
``torch.utils.data.DistributedSampler``. The file is rewritten atomically on every record. The
emulator's ``emulator.diagnostics.topology.analyze`` reads these files after the job. Nothing is written
when ``EMULATOR_DIAG_DIR`` is unset; a failure to write never breaks the training script.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from _sm_emulator_names import ENV_DIAG_DIR as ENV_DIR
from _sm_emulator_names import ENV_GPU_COUNT

_ENV_KEYS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SMDATAPARALLEL_LOCAL_RANK",
    "SM_CURRENT_HOST", "SM_NUM_GPUS", ENV_GPU_COUNT,
)  # fmt: skip

_RECORD: dict[str, Any] = {}


def enabled() -> bool:
    """True when ``EMULATOR_DIAG_DIR`` is set."""
    return bool(os.environ.get(ENV_DIR))


def _write() -> None:
    directory = Path(os.environ[ENV_DIR])
    path = directory / f"{_RECORD['host']}-{_RECORD['pid']}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(_RECORD, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def _env() -> dict[str, str]:
    return {key: os.environ[key] for key in _ENV_KEYS if key in os.environ}


def record_process_group(dist: Any, requested: Any) -> None:
    """Record the default process group just initialised through ``dist``."""
    if not enabled():
        return
    try:
        entry = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "local_rank": _int(os.environ.get("LOCAL_RANK")),
            "backend_requested": None if requested is None else str(requested),
            "backend_actual": str(dist.get_backend()),
            "env": _env(),
            "time": time.time(),
        }
    except Exception as error:  # never break the user's script for a diagnostic
        entry = {"error": repr(error), "time": time.time()}
    _write_entry("process_groups", entry)


def record_sampler(sampler: Any, dist: Any) -> None:
    """Record a ``DistributedSampler``'s ``num_replicas``/``rank`` (and the group's view)."""
    if not enabled():
        return
    initialized = dist.is_available() and dist.is_initialized()
    entry = {
        "class": type(sampler).__qualname__,
        "num_replicas": getattr(sampler, "num_replicas", None),
        "rank": getattr(sampler, "rank", None),
        "group_world_size": dist.get_world_size() if initialized else None,
        "group_rank": dist.get_rank() if initialized else None,
        "time": time.time(),
    }
    _write_entry("samplers", entry)


def _write_entry(key: str, entry: dict[str, Any]) -> None:
    if _RECORD.get("pid") != os.getpid():  # first record, or a forked child
        _RECORD.clear()
        _RECORD.update(host=socket.gethostname(), pid=os.getpid(), process_groups=[], samplers=[])
    _RECORD[key].append(entry)
    _write()


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
