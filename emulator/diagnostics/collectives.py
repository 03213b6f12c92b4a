"""Collectives out of step: compare what every rank issued, and name the first divergence.

The rank side (in-host ``_sm_emulator_collectives``) keeps, per process, a ring of the last
``COLL_CAPACITY`` collectives issued through ``torch.distributed`` (sequence number per process
group, op, signature of dtypes/shapes/reduce op/src, call site, times, and whether the call
returned). :func:`load` reads the rings (also of ranks that were SIGKILLed); :func:`compare`
walks each group's sequence numbers over the window every rank still holds and reports the first
number at which the ranks differ:

- ``collective-mismatch``: "rank 2 (algo-2) issued broadcast as collective #4 of the default
  group (train.py:20 in sync) while ranks 0, 1, 3 issued all_reduce (train.py:16 in step)";
- ``collective-shape-mismatch``: "all_reduce #7 of the default group: float32[8] on ranks 0-1,
  float32[4] on ranks 2-3";
- ``collective-missing``: "rank 3 (algo-2) never reached collective #4 of the default group
  (all_reduce, issued by ranks 0-2 at train.py:16 in step); its last was #3 all_reduce".

:class:`CollectiveCheck` runs this when a job failed or was stopped. The option to let torch check
the same (``TORCH_DISTRIBUTED_DEBUG=DETAIL``: torch wraps every process group and compares each
collective's fingerprint over an extra gloo group, raising on a mismatch; it costs one extra
collective per collective) is :func:`debug_environment`.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..inhost.protocol import COLL_HEADER, COLL_MAGIC, COLL_RAISED, COLL_RECORD, COLL_RETURNED, COLLECTIVES_PREFIX
from ..job.request import host_order
from ..job.result import Diagnostic
from ..observers import AttemptRecords, FinishContext, Report
from .stacks import ranges

#: Values of the ``distributed_debug`` option, as torch spells them.
DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")
STATES = {COLL_RETURNED: "returned", COLL_RAISED: "raised"}


@dataclass(frozen=True)
class Call:
    seq: int
    group: str
    op: str
    state: str  # issued | returned | raised
    crc: int
    issued: float
    returned: float | None
    signature: str
    where: str

    def to_dict(self) -> dict[str, Any]:
        return {"Seq": self.seq, "Op": self.op, "State": self.state, "Signature": self.signature,
                "Where": self.where, "Issued": self.issued, "Returned": self.returned}


@dataclass(eq=False)
class RankRecord:
    host: str
    pid: int
    rank: int
    world_size: int | None
    created: float
    groups: dict[str, list[int]]
    calls: list[Call]  # in issue order

    def by_group(self, group: str) -> dict[int, Call]:
        return {c.seq: c for c in self.calls if c.group == group}

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.host})"


def _read_ring(path: Path, groups: Sequence[str], ops: Sequence[str]) -> list[Call]:
    header = struct.Struct(COLL_HEADER)
    record = struct.Struct(COLL_RECORD)
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        magic, _version, size, capacity, count, _pid = header.unpack_from(data, 0)
        if magic != COLL_MAGIC or size != record.size:
            raise ValueError(f"{path.name}: not a collective ring")
        first = max(0, count - capacity)
        calls = []
        for n in range(first, count):
            seq, group, op, state, crc, t0, t1, sig, where = record.unpack_from(
                data, header.size + (n % capacity) * record.size)
            calls.append(Call(seq, groups[group] if group < len(groups) else f"group {group}",
                              ops[op] if op < len(ops) else f"op {op}", STATES.get(state, "issued"), crc, t0,
                              t1 or None, sig.rstrip(b"\0").decode(errors="replace"),
                              where.rstrip(b"\0").decode(errors="replace")))
        return calls
    finally:
        data.close()


def load(diag_dir: Path, *, since: float = 0.0) -> tuple[list[RankRecord], list[Diagnostic]]:
    """Every rank's record in ``diag_dir`` (rings created before ``since`` are skipped: an earlier
    attempt's); when two processes claim a rank, the later one counts."""
    found: dict[int, RankRecord] = {}
    problems: list[Diagnostic] = []
    for side in sorted(diag_dir.glob(f"{COLLECTIVES_PREFIX}*.json")):
        try:
            meta = json.loads(side.read_text())
            if meta.get("rank") is None or float(meta.get("created", 0)) < since:
                continue
            names = [g["name"] for g in meta["groups"]]
            calls = _read_ring(side.with_suffix(".bin"), names, meta["ops"])
            rec = RankRecord(str(meta["host"]), int(meta["pid"]), int(meta["rank"]), meta.get("world_size"),
                             float(meta["created"]), {g["name"]: list(g["ranks"]) for g in meta["groups"]}, calls)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(Diagnostic("unreadable-record", f"{side.name}: {exc}", (side.stem.split("-")[1],)))
            continue
        old = found.get(rec.rank)
        if old is None or old.created <= rec.created:
            found[rec.rank] = rec
    return sorted(found.values(), key=lambda r: r.rank), problems


def _group_label(group: str) -> str:
    return "the default group" if group == "default" else f"group {group}"


def _who(records: Sequence[RankRecord]) -> str:
    ranks = [r.rank for r in records]
    hosts = ", ".join(sorted({r.host for r in records}, key=host_order))
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {ranges(ranks)} ({hosts})"


def _ranks(records: Sequence[RankRecord]) -> str:
    ranks = [r.rank for r in records]
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {ranges(ranks)}"


def _split(items: Mapping[RankRecord, Call], key: Any) -> list[tuple[Any, list[RankRecord]]]:
    """Ranks grouped by ``key(call)``, the largest group last (the minority is named first)."""
    parts: dict[Any, list[RankRecord]] = {}
    for rec, call in items.items():
        parts.setdefault(key(call), []).append(rec)
    return sorted(parts.items(), key=lambda kv: (len(kv[1]), min(r.rank for r in kv[1])))


def compare(records: Sequence[RankRecord]) -> list[Diagnostic]:
    """The first divergence of each process group (by sequence number), if any."""
    out: list[Diagnostic] = []
    groups = sorted({g for r in records for g in r.groups}, key=lambda g: (g != "default", g))
    for group in groups:
        members = [r for r in records if group in r.groups and r.rank in r.groups[group]]
        if len(members) < 2:
            continue
        seqs = {r: r.by_group(group) for r in members}
        floor = max((min(s) for s in seqs.values() if s), default=1)
        top = max((max(s) for s in seqs.values() if s), default=0)
        for seq in range(floor, top + 1):
            present = {r: s[seq] for r, s in seqs.items() if seq in s}
            missing = [r for r, s in seqs.items() if seq not in s]
            diag = _differ(group, seq, present, missing, seqs)
            if diag is not None:
                out.append(diag)
                break
    return out


def _differ(group: str, seq: int, present: Mapping[RankRecord, Call], missing: Sequence[RankRecord],
            seqs: Mapping[RankRecord, Mapping[int, Call]]) -> Diagnostic | None:
    where = _group_label(group)
    hosts = tuple(sorted({r.host for r in [*present, *missing]}, key=host_order))
    by_op = _split(present, lambda c: c.op)
    if len(by_op) > 1:
        *minority, (major_op, majority) = by_op
        first = ", ".join(f"{_who(recs)} issued {op} ({present[recs[0]].where})" for op, recs in minority)
        return Diagnostic("collective-mismatch",
                          f"{first} as collective #{seq} of {where} while {_ranks(majority)} issued "
                          f"{major_op} ({present[majority[0]].where})", hosts)
    by_sig = _split(present, lambda c: (c.crc, c.signature))
    if len(by_sig) > 1:
        op = next(iter(present.values())).op
        parts = ", ".join(f"{sig or '(no arguments)'} on {_ranks(recs)}"
                          for (_crc, sig), recs in sorted(by_sig, key=lambda kv: min(r.rank for r in kv[1])))
        return Diagnostic("collective-shape-mismatch", f"{op} #{seq} of {where}: {parts}", hosts)
    if missing and present:
        call = next(iter(present.values()))
        lasts = []
        for r in missing:
            own = seqs[r]
            last = own[max(own)] if own else None
            lasts.append(f"rank {r.rank}'s last was #{last.seq} {last.op} ({last.where}, {last.state})" if last
                         else f"rank {r.rank} issued none")
        return Diagnostic("collective-missing",
                          f"{_who(missing)} never reached collective #{seq} of {where} ({call.op}, issued by "
                          f"{_ranks(list(present))} at {call.where}); " + "; ".join(lasts), hosts)
    return None


def summary(records: Iterable[RankRecord]) -> list[dict[str, Any]]:
    """Per rank: how many collectives it issued per group and its last one (for ``job.json``)."""
    out = []
    for r in records:
        last: dict[str, Any] = {}
        for call in r.calls:
            last[call.group] = call
        out.append({"Rank": r.rank, "Host": r.host, "Pid": r.pid,
                    "Last": {g: c.to_dict() for g, c in last.items()}})
    return out


def debug_environment(level: str | None) -> dict[str, str]:
    """The host environment for torch's own checks: ``TORCH_DISTRIBUTED_DEBUG=<level>``
    (``DETAIL`` checks every collective's op, shapes and dtypes across ranks before it runs)."""
    if level is None:
        return {}
    value = level.upper()
    if value not in DEBUG_LEVELS:
        raise ValueError(f"distributed_debug must be one of {', '.join(DEBUG_LEVELS)}, got {level!r}")
    return {"TORCH_DISTRIBUTED_DEBUG": value}


class CollectiveCheck(AttemptRecords):
    """After a failed or stopped job, compare the ranks' collective records."""

    def report(self, finish: FinishContext) -> Report:
        if finish.status == "Completed" or not finish.diag_dir.is_dir():
            return Report()
        records, problems = load(finish.diag_dir, since=self.since)
        if not records:
            return Report(diagnostics=problems)
        found = compare(records)
        return Report(diagnostics=[*problems, *found], emulator={"Collectives": summary(records)})


__all__ = ["Call", "CollectiveCheck", "RankRecord", "compare", "debug_environment", "load", "summary"]
