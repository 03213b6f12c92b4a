"""SMDDP on the emulator's side: where it exists, and the warnings its stand-in raises.

Where it exists (:meth:`~emulator.job.request.JobRequest.has_smddp`): in hosts of GPU
instance types only (the GPU DLCs ship ``smdistributed.dataparallel`` and ``smddprun``; the CPU
DLCs do not), so the plan puts the stand-ins on those hosts' ``PATH``/``PYTHONPATH`` only. On a
CPU type an ``smdistributed``/``pytorchddp`` job runs as it would in a CPU container: the
toolkit's SMDataParallel runner prints "Warning: smddprun not being used as smddp is not
installed" and runs plain ``mpirun``, and ``import smdistributed`` fails. The SageMaker Python SDK
(2.257, ``fw_utils``/``estimator.py``; 3.27 has no check) refuses SMDDP only on ml.p5.48xlarge,
which :mod:`emulator.job.distribution` refuses with the SDK's text.

:class:`SmddpNotes` turns the stand-in's warnings (inferred limits, logged in the hosts as
``smddp warning: …``; see ``emulator/inhost/smddp/site/…/_emulated_backend.py``) into the job's
warnings, and warns when SMDDP runs on a GPU type AWS does not document for it.
"""

from __future__ import annotations

from ..job.distribution import decode
from ..job.instance_types import SMDDP_SUPPORTED
from ..job.request import JobRequest
from ..observers import FinishContext, Observer, Report

#: What the stand-in's warning lines carry (``_emulated_backend.WARNING``).
WARNING_MARK = "smddp warning: "


def uses_smddp_launcher(request: JobRequest) -> bool:
    """Whether the toolkit starts this job with the SMDataParallel runner (``smdistributed`` or
    ``pytorchddp``), which uses ``smddprun`` where the image has it."""
    hps = request.hyperparameters
    return any(decode(hps.get(k, "false")) is True for k in ("sagemaker_distributed_dataparallel_enabled",
                                                             "sagemaker_pytorch_ddp_enabled"))


def type_warnings(request: JobRequest) -> list[str]:
    """Warnings about where this job asks for SMDDP (empty when it does not)."""
    if not uses_smddp_launcher(request):
        return []
    out = []
    for group in request.instance_groups:
        itype = group.type
        if not request.has_smddp(itype):
            why = "CPU images do not ship it" if not itype.is_gpu else f"{request.dlc_image.label} does not ship it"
            out.append(f"{itype.name} has no SMDDP ({why}): the toolkit runs mpirun without "
                       "smddprun and `import smdistributed` fails, as on SageMaker")
        elif not itype.smddp_supported:
            out.append(f"SMDDP on {itype.name}: the GPU image ships it, but AWS documents it only for "
                       f"{', '.join(sorted(SMDDP_SUPPORTED))}")
    return list(dict.fromkeys(out))


class SmddpNotes(Observer):
    """Collects the SMDDP stand-in's warnings from the host logs (once per message, with the
    hosts that logged it) and adds :func:`type_warnings`."""

    def __init__(self, request: JobRequest) -> None:
        self.request = request
        self.seen: dict[str, list[str]] = {}

    def on_line(self, host: str, line: str) -> None:
        at = line.find(WARNING_MARK)
        if at >= 0:
            hosts = self.seen.setdefault(line[at + len(WARNING_MARK):].strip(), [])
            if host not in hosts:
                hosts.append(host)

    def report(self, finish: FinishContext) -> Report:
        warnings = type_warnings(self.request)
        warnings += [f"smddp: {message} ({', '.join(hosts)})" for message, hosts in self.seen.items()]
        return Report(warnings=warnings)
