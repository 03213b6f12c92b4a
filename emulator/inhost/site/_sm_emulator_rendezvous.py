"""Rendezvous reports, rank side: what each process asks ``init_process_group`` for, written
*before* it blocks in the rendezvous.

One file per process in ``EMULATOR_DIAG_DIR``: ``rdzv-<hostname>-<pid>.json`` (the prefix is
``RDZV_PREFIX`` of the host protocol), rewritten atomically (write a temporary file, rename) when
the call starts (``"state": "waiting"``) and again when it returns (``"joined"``); a call that
raises stays ``"waiting"`` (its process usually ends, which ends its host). It holds the rank and
world size asked for (the arguments, else ``RANK`` / ``WORLD_SIZE`` as torch's ``env://`` reads
them), the backend asked for, the master (from a ``tcp://`` init method, else ``MASTER_ADDR`` /
``MASTER_PORT``, with the address resolved through the host's ``/etc/hosts``, never DNS), the host, the pid,
``LOCAL_RANK`` and the launchers' variables (torchrun's, Open MPI's, ``NODE_RANK``), and whether
Lightning is imported. The emulator's ``emulator.diagnostics.rendezvous`` reads these files while the job runs.

Not reported: process groups created with an explicit ``store=`` (no master address; the store is
named ``"store"``), ``new_group`` subgroups (they need no rendezvous of their own), and
rendezvous that bypass ``torch.distributed.init_process_group`` (torch elastic's agent store).
Nothing is written when ``EMULATOR_DIAG_DIR`` is unset; a failure to write never breaks the
training script.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import _sm_emulator_protocol as P

#: The launchers' variables a report carries (what each launcher gives a rank).
ENV_KEYS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
    "TORCHELASTIC_RESTART_COUNT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "SM_NUM_GPUS", P.ENV_GPU_COUNT,
)  # fmt: skip


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _master(init_method: Any, store: Any) -> tuple[str | None, str | None]:
    if store is not None:
        return "store", None
    text = str(init_method or "env://")
    if text.startswith("tcp://"):
        url = urlparse(text)
        return url.hostname, None if url.port is None else str(url.port)
    if text.startswith("env://"):
        return os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    return text, None  # file:// and others: the init method is the meeting point


def _resolve(address: str | None) -> str | None:
    """``address`` as an IP through the host's ``/etc/hosts`` (where every ``algo-N`` is), never
    through DNS (no network wait before the rendezvous); unchanged when not listed there."""
    if not address or address == "store" or "://" in address:
        return address
    try:
        socket.inet_aton(address)
        return address
    except OSError:
        pass
    try:
        with open("/etc/hosts") as hosts:
            for line in hosts:
                fields = line.split("#", 1)[0].split()
                if len(fields) > 1 and address in fields[1:]:
                    return fields[0]
    except OSError:
        pass
    return address


def _write(directory: Path, record: dict[str, Any]) -> None:
    path = directory / f"{P.RDZV_PREFIX}{record['host']}-{record['pid']}.json"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def report(arguments: dict[str, Any]) -> Callable[[Any], None]:
    """Write this process's request (``arguments``: ``init_process_group``'s, bound by name, before
    any translation) and return a callback that marks it joined. No-op without the diag dir."""
    directory = os.environ.get(P.ENV_DIAG_DIR)
    if not directory:
        return lambda _result: None
    try:
        rank = _int(arguments.get("rank", -1))
        world = _int(arguments.get("world_size", -1))
        addr, port = _master(arguments.get("init_method"), arguments.get("store"))
        record: dict[str, Any] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "rank": rank if rank is not None and rank >= 0 else _int(os.environ.get("RANK")),
            "rank_from": "argument" if rank is not None and rank >= 0 else "RANK",
            "world_size": world if world is not None and world >= 0 else _int(os.environ.get("WORLD_SIZE")),
            "world_from": "argument" if world is not None and world >= 0 else "WORLD_SIZE",
            "backend": None if arguments.get("backend") is None else str(arguments.get("backend")),
            "master_addr": addr,
            "master_port": port,
            "master_ip": _resolve(addr),
            "env": {key: os.environ[key] for key in ENV_KEYS if key in os.environ},
            "lightning": any(m in sys.modules for m in ("lightning", "pytorch_lightning", "lightning_fabric")),
            "state": "waiting",
            "time": time.time(),
        }
    except Exception as error:  # never break the user's script for a diagnostic
        record = {"host": socket.gethostname(), "pid": os.getpid(), "error": repr(error), "state": "waiting",
                  "time": time.time()}
    _write(Path(directory), record)

    def joined(_result: Any) -> None:
        record.update(state="joined", joined=time.time())
        _write(Path(directory), record)

    return joined
