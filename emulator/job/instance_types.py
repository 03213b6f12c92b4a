"""The SageMaker training instance types the emulator knows: GPUs, vCPUs and memory.

What is emulated: the GPU count (``nvidia-smi --list-gpus`` in each host reports it, so the real
toolkit derives ``SM_NUM_GPUS`` and processes-per-host from it), the GPU model name, each GPU's
memory as CUDA reports it (``torch.cuda.mem_get_info``/``get_device_properties().total_memory``,
so memory-based batch sizing picks what it would pick on the real GPU). Whether a host finds SMDDP
depends on the image too: :meth:`emulator.job.request.JobRequest.has_smddp`.
What is not: vCPUs and memory are recorded for ``job.json`` only; ``SM_NUM_CPUS`` is this
machine's real CPU count, because the toolkit reads it from ``multiprocessing.cpu_count()``.

GPU memory (:data:`GPU_MEMORY`) is what CUDA reports as ``totalGlobalMem`` (torch's
``total_memory``), in bytes, from public ``deviceQuery`` output: a few hundred MiB less than the
card's nominal size and ``nvidia-smi``'s ``memory.total`` (the driver reserves some), and it moves
by up to ~0.2 % between driver versions. Sources per model are next to the values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import RequestError


@dataclass(frozen=True)
class InstanceType:
    """One ``ml.*`` training instance type."""

    name: str
    vcpus: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    neuron_cores: int = 0

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def gpu_memory(self) -> int:
        """Bytes of memory per GPU as CUDA reports it (0 without GPUs); see :data:`GPU_MEMORY`."""
        return GPU_MEMORY.get(self.gpu_model, 0) if self.is_gpu else 0

    @property
    def smddp_supported(self) -> bool:
        """Whether AWS documents SMDDP for this type (:data:`SMDDP_SUPPORTED`)."""
        return self.name in SMDDP_SUPPORTED

    @property
    def is_trainium(self) -> bool:
        return self.name.startswith("ml.trn")


def _family(prefix: str, sizes: dict[str, tuple[int, int, int]], gpu_model: str = "") -> list[InstanceType]:
    return [
        InstanceType(f"ml.{prefix}.{size}", vcpus, mem, gpus, gpu_model if gpus else "")
        for size, (vcpus, mem, gpus) in sizes.items()
    ]


_T4 = "Tesla T4"
_A10G = "NVIDIA A10G"
_V100 = "Tesla V100-SXM2-16GB"
_V100_32 = "Tesla V100-SXM2-32GB"
_A100_40 = "NVIDIA A100-SXM4-40GB"
_A100_80 = "NVIDIA A100-SXM4-80GB"
_H100 = "NVIDIA H100 80GB HBM3"

#: Bytes per GPU as CUDA reports them (``cudaDeviceProp.totalGlobalMem``, torch's
#: ``total_memory``), from public ``deviceQuery`` output ("Total amount of global memory") unless
#: noted. Nominal sizes per instance type: AWS's accelerated-computing instance table
#: (https://aws.amazon.com/ec2/instance-types/, "GPU Memory") — T4 16 GB, A10G 24 GB, V100 16/32 GB,
#: A100 40/80 GB, H100 80 GB.
GPU_MEMORY: dict[str, int] = {
    _T4: 15_835_660_288,  # 15102 MBytes, driver 12.2 (Google Colab deviceQuery)
    _A10G: 24_146_608_128,  # nvidia-smi memory.total 23028 MiB on g5 (CUDA's own total not found)
    _V100: 16_928_342_016,  # 16144 MBytes, driver 12.4
    _V100_32: 34_089_926_656,  # 32511 MBytes, driver 11.6
    _A100_40: 42_298_834_944,  # 40339 MBytes, driver 12.2 (bottlerocket-os/bottlerocket#3873)
    _A100_80: 85_100_068_864,  # 81158 MBytes, driver 12.5
    _H100: 85_017_755_648,  # 81079 MBytes, driver 13.0
}

#: Instance types AWS documents for the SMDDP library today: "Instance types supported by the
#: SageMaker AI data parallel library: ml.p4d.24xlarge, ml.p4de.24xlarge"
#: (https://docs.aws.amazon.com/sagemaker/latest/dg/distributed-data-parallel-support.html).
#: SDK 2.257's ``fw_utils.SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES`` still lists ml.p3.16xlarge and
#: ml.p3dn.24xlarge too, but the SDK no longer enforces it; it refuses only ml.p5.48xlarge
#: (``estimator.py``: "SMModelParallel and SMDataParallel currently do not support p5 instances.").
#: On other GPU types the GPU DLC still ships the library: a ``pytorchddp`` job on ml.g5.12xlarge got
#: past ``init_process_group("smddp")`` (Lightning-AI/pytorch-lightning#20409), so the emulator
#: runs it there too, with a warning.
SMDDP_SUPPORTED = frozenset({"ml.p4d.24xlarge", "ml.p4de.24xlarge"})

_TYPES: list[InstanceType] = [
    *_family("m5", {"large": (2, 8, 0), "xlarge": (4, 16, 0), "2xlarge": (8, 32, 0),
                    "4xlarge": (16, 64, 0), "12xlarge": (48, 192, 0), "24xlarge": (96, 384, 0)}),
    *_family("c5", {"large": (2, 4, 0), "xlarge": (4, 8, 0), "2xlarge": (8, 16, 0),
                    "4xlarge": (16, 32, 0), "9xlarge": (36, 72, 0), "18xlarge": (72, 144, 0)}),
    *_family("g4dn", {"xlarge": (4, 16, 1), "2xlarge": (8, 32, 1), "4xlarge": (16, 64, 1),
                      "8xlarge": (32, 128, 1), "12xlarge": (48, 192, 4), "16xlarge": (64, 256, 1)},
             _T4),
    *_family("g5", {"xlarge": (4, 16, 1), "2xlarge": (8, 32, 1), "4xlarge": (16, 64, 1),
                    "8xlarge": (32, 128, 1), "12xlarge": (48, 192, 4), "16xlarge": (64, 256, 1),
                    "24xlarge": (96, 384, 4), "48xlarge": (192, 768, 8)}, _A10G),
    *_family("p3", {"2xlarge": (8, 61, 1), "8xlarge": (32, 244, 4), "16xlarge": (64, 488, 8)},
             _V100),
    InstanceType("ml.p3dn.24xlarge", 96, 768, 8, _V100_32),
    InstanceType("ml.p4d.24xlarge", 96, 1152, 8, _A100_40),
    InstanceType("ml.p4de.24xlarge", 96, 1152, 8, _A100_80),
    InstanceType("ml.p5.48xlarge", 192, 2048, 8, _H100),
    InstanceType("ml.trn1.2xlarge", 8, 32, 0, "", neuron_cores=2),
    InstanceType("ml.trn1.32xlarge", 128, 512, 0, "", neuron_cores=32),
    InstanceType("ml.trn1n.32xlarge", 128, 512, 0, "", neuron_cores=32),
]

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _TYPES}
DEFAULT_INSTANCE_TYPE = "ml.m5.xlarge"


#: AWS Trainium (``ml.trn*``) and Inferentia (``ml.inf*``) types: NeuronCores, not GPUs.
NEURON_TYPE = re.compile(r"^ml[._](trn|inf)\d")


def is_neuron(name: str) -> bool:
    """Whether ``name`` is a Trainium/Inferentia (AWS Neuron) instance type."""
    return isinstance(name, str) and NEURON_TYPE.match(name) is not None


def refuse_neuron(name: str, *, field: str = "ResourceConfig.InstanceType") -> None:
    """Raise the emulator's refusal of a Trainium/Inferentia type (not emulated: its jobs need the
    Neuron SDK, ``torch-neuronx`` and NeuronCores; run as CPU they would prove nothing)."""
    kind = "Trainium" if NEURON_TYPE.match(name)[1] == "trn" else "Inferentia"  # type: ignore[index]
    raise RequestError(
        field, f"{name} is an AWS {kind} (Neuron) instance type, which the emulator does not emulate: "
        "its jobs need the Neuron SDK's torch-neuronx and NeuronCores, which no emulated host has",
        allowed="a GPU (ml.g*, ml.p*) or CPU (ml.m*, ml.c*) instance type")


def lookup(name: str, *, field: str = "ResourceConfig.InstanceType") -> InstanceType:
    """Return the instance type called ``name`` or raise a :class:`RequestError` naming ``field``.
    Trainium types are in the table (the SDK's distribution checks need them) and are refused by
    :func:`emulator.job.request.validate`; other Neuron types are refused here."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        if is_neuron(name):
            refuse_neuron(name, field=field)
        families = sorted({n.split(".")[1] for n in INSTANCE_TYPES})
        hint = ""
        if name in ("local", "local_gpu"):
            hint = "; 'local' is SageMaker local mode's pseudo type, name a real ml.* type instead"
        raise RequestError(
            field,
            f"unknown instance type {name!r}{hint}",
            allowed="ml.<family>.<size> for families " + ", ".join(families),
        ) from None
