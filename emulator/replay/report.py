"""The replay report: what a replay runs, printed before start, and how it ended against the record.

Before start: what is replayed as recorded, what is scaled (hosts, emulated GPUs per host), where
the code and each channel come from, and what is not replayed. At the end: the recorded
``TrainingJobStatus``, ``FailureReason`` and secondary statuses beside the replay's, and whether
the outcome reproduced: the same status and, for ``Failed``, whether the ``FailureReason``'s first
line matches once host names, addresses, ports and pids are removed (:func:`first_line`).
A replay "reproduced" its job when the statuses are equal; the first line is reported, not
required (its text often names only the toolkit's error class).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..job.instance_types import lookup
from .mapping import ACCEPTED_NOT_EMULATED, Replay

#: What differs between two runs of the same failure, and is removed before comparing.
VOLATILE = (
    (re.compile(r"\bip-\d+-\d+-\d+-\d+(?:\.[\w.-]+)?"), "<host>"),
    (re.compile(r"\balgo-\d+\b"), "<host>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "<address>"),
    (re.compile(r"(?<=:)\d{2,5}\b"), "<port>"),
    (re.compile(r"\bpid[:= ]\s*\d+", re.IGNORECASE), "pid <pid>"),
)
#: A Python exception line (``ValueError: …``) inside a ``FailureReason``.
EXCEPTION = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)): \S.*$")
RULE = "replay exits 0 iff the replay's TrainingJobStatus equals the recorded one"


def first_line(reason: str | None) -> str:
    """The first line of a ``FailureReason``, without host names, addresses, ports and pids."""
    line = (reason or "").strip().splitlines()[0] if (reason or "").strip() else ""
    for pattern, placeholder in VOLATILE:
        line = pattern.sub(placeholder, line)
    return line.strip()


def exception_line(reason: str | None) -> str | None:
    """The first Python exception line after the first line of a ``FailureReason``, if any."""
    for line in (reason or "").splitlines()[1:]:
        match = EXCEPTION.match(line)
        if match:
            return line.strip()
    return None


def before(replay: Replay, origin: str) -> list[str]:
    """The report printed before start."""
    request = replay.request
    lines = [f"replay of {replay.recorded_name or '(unnamed job)'} ({origin}) as {request.job_name}",
             "  as recorded:", *(f"    {x}" for x in _as_recorded(replay))]
    sampled = [c.name for c in replay.channels if c.how.startswith("sampled")]
    scaled = [*replay.scaled, *_gpus(replay),
              *([f"data: {', '.join(sampled)} sampled from S3 (--sample), not the whole channel"] if sampled else [])]
    lines += ["  scaled:", *(f"    {x}" for x in scaled)] if scaled else ["  scaled: nothing"]
    if replay.code is not None:
        lines.append(f"  code: {replay.code.recorded} → {replay.code.local} ({replay.code.how})")
    lines.append(f"  profile: {request.profile} ({replay.profile_from})")
    lines.append("  channels:" if replay.channels else "  channels: none")
    lines += [f"    {c.name}: {c.recorded} → {c.local} ({c.how})" for c in replay.channels]
    output = (replay.document.get("OutputDataConfig") or {}).get("S3OutputPath")
    lines.append(f"  output: {output} → {request.job_dir}")
    if request.checkpoint_dir is not None:
        recorded = (replay.document.get("CheckpointConfig") or {}).get("S3Uri")
        lines.append(f"  checkpoints: {recorded} → {request.checkpoint_dir} (a fresh folder)")
    lines.append("  not replayed:" if replay.not_replayed else "  not replayed: nothing")
    lines += [f"    {k}: {why}" for k, why in replay.not_replayed]
    if replay.dropped:
        lines.append(f"  response fields dropped: {', '.join(replay.dropped)}")
    return lines


def _as_recorded(replay: Replay) -> list[str]:
    doc, request = replay.document, replay.request
    image = (replay.create.get("AlgorithmSpecification") or {}).get("TrainingImage")
    override = f", run as framework_version {request.framework_version}" if image and request.framework_version else ""
    out = [f"TrainingImage {image}{override}: {request.dlc_image.label}" if image else
           f"TrainingImage: none named ({request.dlc_image.label})"]
    hps = doc.get("HyperParameters") or {}
    out.append(f"HyperParameters: {len(hps)}, byte for byte (sagemaker_submit_directory and sagemaker_job_name "
               "keep the recorded job's values)" if hps else "HyperParameters: none")
    env = doc.get("Environment") or {}
    out.append(f"Environment: {', '.join(sorted(env))}" if env else "Environment: none")
    stopping = doc.get("StoppingCondition") or {}
    out.append("StoppingCondition: " + (", ".join(f"{k} {v}" for k, v in stopping.items()) or "none"))
    out.append(f"CheckpointConfig.LocalPath {request.checkpoint_local_path}")
    rc = doc["ResourceConfig"]
    groups = rc.get("InstanceGroups")
    out.append("ResourceConfig: " + (", ".join(f"{g.get('InstanceGroupName')} {g.get('InstanceCount')} x "
                                               f"{g.get('InstanceType')}" for g in groups) if groups else
                                     f"{rc.get('InstanceCount')} x {rc.get('InstanceType')}"))
    accepted = [f"{k} {_short(doc[k])}" for k in ACCEPTED_NOT_EMULATED if k in doc]
    if accepted:
        out.append("accepted, effect not emulated: " + "; ".join(accepted))
    return out


def _short(value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _gpus(replay: Replay) -> list[str]:
    request = replay.request
    out = []
    for group in request.instance_groups:
        itype = lookup(group.instance_type)
        if not itype.is_gpu:
            continue
        gpus = request.gpus_per_host if request.gpus_per_host is not None else itype.gpus
        how = "" if gpus == itype.gpus else f" → {gpus} per host (scaled down)"
        out.append(f"GPUs per host: {itype.gpus} on {itype.name}{how}, emulated on the CPU "
                   f"({gpus * group.count} rank(s) at most on this machine)")
    return out


@dataclass(frozen=True)
class Outcome:
    """The recorded job's end beside the replay's."""

    recorded_status: str | None
    recorded_reason: str | None
    recorded_transitions: tuple[str, ...]
    status: str
    reason: str | None
    transitions: tuple[str, ...]

    @classmethod
    def of(cls, document: Mapping[str, Any], description: Mapping[str, Any]) -> Outcome:
        return cls(document.get("TrainingJobStatus"), document.get("FailureReason"), _statuses(document),
                   str(description.get("TrainingJobStatus")), description.get("FailureReason"),
                   _statuses(description))

    @property
    def same_status(self) -> bool:
        return self.status == self.recorded_status

    @property
    def first_lines_match(self) -> bool:
        return first_line(self.reason) == first_line(self.recorded_reason)

    def verdict(self) -> str:
        if not self.same_status:
            return f"not reproduced: recorded {self.recorded_status}, the replay ended {self.status}"
        if self.status != "Failed":
            return f"reproduced: {self.status}, as recorded"
        if self.first_lines_match:
            return ("reproduced: Failed as recorded, and the FailureReason's first line matches "
                    "(host names, addresses, ports and pids removed)")
        return "reproduced: Failed as recorded, but the FailureReason's first line differs"

    def lines(self) -> list[str]:
        out = []
        for who, status, reason, transitions in (
                ("recorded", self.recorded_status, self.recorded_reason, self.recorded_transitions),
                ("replay", self.status, self.reason, self.transitions)):
            out.append(f"  {who + ':':9} {status}" + (f"   ({' → '.join(transitions)})" if transitions else ""))
            if reason:
                out.append(f"  {'':9} FailureReason: {first_line(reason)}")
                error = exception_line(reason)
                if error:
                    out.append(f"  {'':9} error: {error}")
        return ["replay outcome:", *out, f"  {self.verdict()}",
                f"exit {0 if self.same_status else 1}: {RULE} ({self.status} {'=' if self.same_status else '≠'} "
                f"{self.recorded_status})"]


def _statuses(description: Mapping[str, Any]) -> tuple[str, ...]:
    transitions: Sequence[Any] = description.get("SecondaryStatusTransitions") or ()
    return tuple(str(t.get("Status")) for t in transitions if isinstance(t, Mapping))


__all__ = ["RULE", "Outcome", "before", "exception_line", "first_line"]
