"""What a job does differently from SageMaker because of how it was asked to run.

Each entry is a sentence for ``job.json``'s ``Emulator.Deviations`` (and the console). Only
deviations a request or an option chose are listed here — the speed-ups of its profile
(:mod:`emulator.job.profiles`) and its own switches; the emulator's fixed differences are in the
docs' "What is and is not emulated" (``docs/reference/differences.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .request import JobRequest

#: One sentence per speed-up (``Emulator.Deviations``).
SHORT_SLEEPS = ("toolkit MPI sleeps capped: the MPI-family runners' fixed 30-s waits after mpirun at 1 s, "
                "their 1-s polls at 0.2 s (only time changes)")
NO_TOOLKIT_TORCH_IMPORT = ("toolkit without import torch: SM_DLC_TORCH_VERSION read from torch/version.py "
                           "(the same string; only time changes)")
FAST_START = ("fast rank start: ranks forked from a pre-imported interpreter where PYTHONHASHSEED is a fixed "
              "number (what torch and the job read at import time comes from the host's environment, not the "
              "rank's; PIDs and parent processes differ)")
NO_TIMELINE_PNG = "timeline.png not drawn (timeline.json is; python -m emulator timeline JOB_DIR draws it)"


def for_request(request: JobRequest, framework: Mapping[str, Any] | None = None,
                fast_start: bool = True) -> list[str]:
    """The deviations ``request`` asks for (one sentence each) on a backend that runs fast start
    when the profile asks for it (``fast_start``: ``Backend.fast_start``); with ``framework``
    (``job.json`` ``Emulator.Framework``, see :func:`emulator.job.frameworks.record`), those of the
    torch, Python and toolkits its ``framework_version`` ran with."""
    used = request.speedups()
    out = []
    if used.short_toolkit_sleeps:
        out.append(SHORT_SLEEPS)
    if used.toolkit_skips_torch_import:
        out.append(NO_TOOLKIT_TORCH_IMPORT)
    if used.fast_start and fast_start:
        out.append(FAST_START)
    if not used.timeline_png:
        out.append(NO_TIMELINE_PNG)
    if request.gpus_per_host is not None:
        for group in request.instance_groups:
            itype = group.type
            if itype.is_gpu and request.gpus_per_host < itype.gpus:
                out.append(f"GPUs scaled down: {request.gpus_per_host} of {itype.gpus} GPUs per host on "
                           f"{itype.name} (instance group {group.name}); SM_NUM_GPUS and the ranks per host "
                           "follow the smaller count")
    if request.smddp_strict:
        out.append("SMDDP strict: the smddp stand-in refuses limits that are only inferred (see docs/guides/mpi.md)")
    out += list((framework or {}).get("Deviations") or ())
    return out
