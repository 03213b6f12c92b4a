"""How much of its GPU each rank used: ``Emulator.GpuMemory`` in ``job.json`` and a console table.

Every process of a host that held memory on an emulated GPU writes ``gpumem-<host>-<pid>.json`` in
the job's diagnostics folder at exit and when it runs out of memory
(``emulator/inhost/site/_sm_emulator_memory.py``: what is counted, what is estimated). After the job,
:class:`GpuMemoryReport` turns them into one row per rank and GPU: the peak bytes allocated (live
tensors, as ``torch.cuda.max_memory_allocated()``) and reserved (the caching allocator's segments, as
``max_memory_reserved()``) against the GPU's capacity (``total_memory`` as CUDA reports it for the
instance type, or the job's ``gpu_memory_gib``), and the CUDA out-of-memory error a rank raised. A
rank whose peak reserved memory plus the estimated CUDA context passes :data:`WARN_FRACTION` of the
capacity gets a warning: on SageMaker it is one larger batch (or another driver) away from an OOM.

A process killed by a signal writes nothing (its GPU is not reported); processes of a spot
interruption's earlier attempt are reported with the last one's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..observers import FinishContext, Observer, Report

#: The in-host file prefix (``_sm_emulator_memory.FILE_PREFIX``).
FILE_PREFIX = "gpumem-"
#: Above this share of the capacity a rank's row gets a warning.
WARN_FRACTION = 0.90
GIB = 1 << 30


@dataclass(frozen=True)
class GpuUse:
    """One rank's use of one emulated GPU."""

    host: str
    pid: int
    rank: int | None
    gpu: int
    model: str
    peak_allocated: int
    peak_reserved: int
    capacity: int
    context: int
    oom: str | None

    @property
    def fraction(self) -> float:
        """Peak reserved plus the estimated context, as a share of the capacity."""
        return (self.peak_reserved + self.context) / self.capacity if self.capacity else 0.0

    @property
    def label(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"
        return f"{who} ({self.host}, GPU {self.gpu})"

    def to_dict(self) -> dict[str, Any]:
        return {"Rank": self.rank, "Host": self.host, "Pid": self.pid, "Gpu": self.gpu, "Model": self.model,
                "PeakAllocatedBytes": self.peak_allocated, "PeakReservedBytes": self.peak_reserved,
                "CapacityBytes": self.capacity, "ContextBytes": self.context,
                "PercentOfCapacity": round(100 * self.fraction, 1), "OutOfMemory": self.oom}


def read(diag_dir: Path) -> list[GpuUse]:
    """The rows of every ``gpumem-*.json`` in ``diag_dir`` (unreadable files are skipped), by rank."""
    rows = []
    for path in sorted(diag_dir.glob(f"{FILE_PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            for gpu, use in data.get("gpus", {}).items():
                oom = data.get("oom") if str(data.get("oom_gpu")) == gpu else None
                rows.append(GpuUse(host=str(data.get("host", "?")), pid=int(data.get("pid", 0)),
                                   rank=data.get("rank"), gpu=int(gpu), model=str(data.get("model", "")),
                                   peak_allocated=int(use["peak_allocated"]), peak_reserved=int(use["peak_reserved"]),
                                   capacity=int(use["capacity"]), context=int(use.get("context", 0)), oom=oom))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(rows, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.host, r.pid, r.gpu))


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def console(rows: list[GpuUse]) -> list[str]:
    """The console table: one line per rank and GPU, the warnings' mark on those above 90 %."""
    if not rows:
        return []
    lines = ["GPU memory (emulated; peak allocated / peak reserved of capacity, with an estimated CUDA context):"]
    for r in rows:
        mark = "  <-- OUT OF MEMORY" if r.oom else "  <-- above 90 %" if r.fraction > WARN_FRACTION else ""
        lines.append(f"  {r.label}: peak {_gib(r.peak_allocated)} allocated, {_gib(r.peak_reserved)} reserved "
                     f"of {_gib(r.capacity)} {r.model}, {100 * r.fraction:.0f} %{mark}")
    return lines


def warnings(rows: list[GpuUse]) -> list[str]:
    """One warning per rank that ran out of memory or came within 10 % of it."""
    out = []
    for r in rows:
        if r.oom:
            out.append(f"{r.label} ran out of GPU memory at peak {_gib(r.peak_reserved)} reserved of "
                       f"{_gib(r.capacity)} {r.model}: {r.oom.split('. If reserved')[0]}")
        elif r.fraction > WARN_FRACTION:
            out.append(f"{r.label} used {100 * r.fraction:.0f} % of its {_gib(r.capacity)} {r.model} (peak "
                       f"{_gib(r.peak_reserved)} reserved + the CUDA context): a larger batch, sequence or "
                       "another driver may run out of memory on SageMaker")
    return out


def describe(rows: list[GpuUse]) -> dict[str, Any]:
    """``Emulator.GpuMemory`` of ``job.json``."""
    return {"Counted": True, "Ranks": [r.to_dict() for r in rows]}


class GpuMemoryReport(Observer):
    """Reports each rank's peak GPU memory against its capacity (see the module docstring)."""

    def report(self, finish: FinishContext) -> Report:
        rows = read(finish.diag_dir)
        if not rows:
            return Report()
        return Report(emulator={"GpuMemory": describe(rows)}, console=console(rows), warnings=warnings(rows))
