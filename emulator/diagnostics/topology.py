"""Rank diagnostics: read the records ranks wrote to ``EMULATOR_DIAG_DIR`` and name the mistakes.

The rank side lives in ``emulator/inhost/site/_sm_emulator_diag.py``: every process that
initialises a default process group, or creates a ``DistributedSampler``, writes
``<hostname>-<pid>.json``::

    {"host": "algo-1", "pid": 123,
     "process_groups": [{"rank": 0, "world_size": 4, "local_rank": 0,
                         "backend_requested": "nccl", "backend_actual": "gloo",
                         "env": {"RANK": "0", ...}, "time": 1700000000.0}],
     "samplers": [{"class": "DistributedSampler", "num_replicas": 4, "rank": 0,
                   "group_world_size": 4, "group_rank": 0, "time": 1700000000.5}]}

:func:`analyze` reports:

- ``world-size-mismatch``: processes disagree about the world size;
- ``duplicate-rank``: two processes claim the same global rank;
- ``sampler-mismatch``: a ``DistributedSampler``'s ``num_replicas`` differs from its process
  group's world size (each rank then sees the wrong share of the data);
- ``sampler-rank-mismatch``: a sampler's ``rank`` differs from the process's global rank;
- ``unreadable-record``: a record file that is not valid JSON.

Only the latest process group of each process is compared (a script may re-initialise).
This module does not import torch.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inhost import protocol as P
from ..job.result import Diagnostic
from ..observers import FinishContext, Observer, Report


@dataclass(frozen=True)
class _Process:
    host: str
    pid: int
    group: dict[str, Any] | None
    samplers: tuple[dict[str, Any], ...]

    @property
    def label(self) -> str:
        return f"{self.host} pid {self.pid}"


def _load(diag_dir: Path) -> tuple[list[_Process], list[Diagnostic]]:
    processes: list[_Process] = []
    problems: list[Diagnostic] = []
    other = (P.COLLECTIVES_PREFIX, P.EXIT_PREFIX, P.STACKS_PREFIX, P.RDZV_PREFIX)  # records of other observers
    for path in sorted(p for p in diag_dir.glob("*.json") if not p.name.startswith(other)):
        try:
            data = json.loads(path.read_text())
            groups = [g for g in data.get("process_groups", []) if "world_size" in g]
            processes.append(
                _Process(
                    host=str(data.get("host", path.stem.rsplit("-", 1)[0])),
                    pid=int(data.get("pid", 0)),
                    group=groups[-1] if groups else None,
                    samplers=tuple(data.get("samplers", [])),
                )
            )
        except (OSError, ValueError, TypeError, AttributeError) as error:
            host = path.stem.rsplit("-", 1)[0]
            problems.append(Diagnostic("unreadable-record", f"{path.name}: {error}", (host,)))
    return processes, problems


def _hosts(processes: list[_Process]) -> tuple[str, ...]:
    return tuple(sorted({p.host for p in processes}))


def _world_sizes(processes: list[_Process]) -> list[Diagnostic]:
    by_size: dict[int, list[_Process]] = defaultdict(list)
    for process in processes:
        if process.group is not None:
            by_size[int(process.group["world_size"])].append(process)
    if len(by_size) < 2:
        return []
    parts = "; ".join(
        f"world_size={size} on {', '.join(p.label for p in group)}" for size, group in sorted(by_size.items())
    )
    everyone = [p for group in by_size.values() for p in group]
    return [
        Diagnostic(
            "world-size-mismatch",
            f"processes disagree about the world size: {parts}. Check WORLD_SIZE, the launcher's "
            "process count per host and the instance count.",
            _hosts(everyone),
        )
    ]


def _duplicate_ranks(processes: list[_Process]) -> list[Diagnostic]:
    by_rank: dict[int, list[_Process]] = defaultdict(list)
    for process in processes:
        if process.group is not None:
            by_rank[int(process.group["rank"])].append(process)
    return [
        Diagnostic(
            "duplicate-rank",
            f"rank {rank} is claimed by {len(claimants)} processes "
            f"({', '.join(p.label for p in claimants)}). Each process needs its own RANK; "
            "a hard-coded rank or node_rank usually causes this.",
            _hosts(claimants),
        )
        for rank, claimants in sorted(by_rank.items())
        if len(claimants) > 1
    ]


def _samplers(processes: list[_Process]) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    for process in processes:
        group_size = process.group["world_size"] if process.group else None
        group_rank = process.group["rank"] if process.group else None
        for sampler in process.samplers:
            size = sampler.get("group_world_size", group_size) or group_size
            rank = sampler.get("group_rank", group_rank)
            if rank is None:
                rank = group_rank
            name = sampler.get("class", "DistributedSampler")
            if size is not None and sampler.get("num_replicas") != size:
                found.append(
                    Diagnostic(
                        "sampler-mismatch",
                        f"{name} on {process.label} has num_replicas={sampler.get('num_replicas')}"
                        f" but the process group has world_size={size}: ranks will train on "
                        "overlapping or missing data. Pass num_replicas=dist.get_world_size().",
                        (process.host,),
                    )
                )
            if rank is not None and sampler.get("rank") != rank:
                found.append(
                    Diagnostic(
                        "sampler-rank-mismatch",
                        f"{name} on {process.label} has rank={sampler.get('rank')} but the "
                        f"process's global rank is {rank}. Pass rank=dist.get_rank() (not the "
                        "local rank).",
                        (process.host,),
                    )
                )
    return found


def analyze(diag_dir: Path) -> list[Diagnostic]:
    """Every problem the records in ``diag_dir`` show (empty if none, or no such folder)."""
    if not diag_dir.is_dir():
        return []
    processes, problems = _load(diag_dir)
    return [
        *problems,
        *_world_sizes(processes),
        *_duplicate_ranks(processes),
        *_samplers(processes),
    ]


__all__ = ["Diagnostic", "analyze"]


class TopologyObserver(Observer):
    """Reports :func:`analyze`'s findings on the last attempt's rank records."""

    def report(self, finish: FinishContext) -> Report:
        return Report(diagnostics=analyze(finish.diag_dir))
