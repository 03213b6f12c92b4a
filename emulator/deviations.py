"""What a job does differently from SageMaker because of how it was asked to run.

Each entry is a sentence for ``job.json``'s ``Emulator.Deviations`` (and the console). Only
deviations a request or an option chose are listed here; the emulator's fixed differences are in
the README's "What is and is not emulated".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .request import JobRequest


def for_request(request: JobRequest, framework: Mapping[str, Any] | None = None) -> list[str]:
    """The deviations ``request`` asks for (one sentence each); with ``framework`` (``job.json``
    ``Emulator.Framework``, see :func:`emulator.frameworks.record`), those of the torch, Python
    and toolkits its ``framework_version`` ran with."""
    out = []
    if request.short_toolkit_sleeps:
        out.append("toolkit MPI sleeps capped at 1 s")
    if request.fast_start:
        out.append("fast rank start (forked ranks)")
    if request.gpus_per_host is not None:
        for group in request.instance_groups:
            itype = group.type
            if itype.is_gpu and request.gpus_per_host < itype.gpus:
                out.append(f"GPUs scaled down: {request.gpus_per_host} of {itype.gpus} GPUs per host on "
                           f"{itype.name} (instance group {group.name}); SM_NUM_GPUS and the ranks per host "
                           "follow the smaller count")
    if request.smddp_strict:
        out.append("SMDDP strict: the smddp stand-in refuses limits that are only inferred (see the README)")
    out += list((framework or {}).get("Deviations") or ())
    return out
