"""The SageMaker training instance types the emulator knows: GPUs, vCPUs and memory.

What is emulated: the GPU count (``nvidia-smi --list-gpus`` in each host reports it, so the real
toolkit derives ``SM_NUM_GPUS`` and processes-per-host from it) and the GPU model name.
What is not: vCPUs and memory are recorded for ``job.json`` only; ``SM_NUM_CPUS`` is this
machine's real CPU count, because the toolkit reads it from ``multiprocessing.cpu_count()``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RequestError


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
    InstanceType("ml.p3dn.24xlarge", 96, 768, 8, "Tesla V100-SXM2-32GB"),
    InstanceType("ml.p4d.24xlarge", 96, 1152, 8, "NVIDIA A100-SXM4-40GB"),
    InstanceType("ml.p4de.24xlarge", 96, 1152, 8, "NVIDIA A100-SXM4-80GB"),
    InstanceType("ml.p5.48xlarge", 192, 2048, 8, "NVIDIA H100 80GB HBM3"),
    InstanceType("ml.trn1.2xlarge", 8, 32, 0, "", neuron_cores=2),
    InstanceType("ml.trn1.32xlarge", 128, 512, 0, "", neuron_cores=32),
    InstanceType("ml.trn1n.32xlarge", 128, 512, 0, "", neuron_cores=32),
]

INSTANCE_TYPES: dict[str, InstanceType] = {t.name: t for t in _TYPES}
DEFAULT_INSTANCE_TYPE = "ml.m5.xlarge"


def lookup(name: str, *, field: str = "ResourceConfig.InstanceType") -> InstanceType:
    """Return the instance type called ``name`` or raise a :class:`RequestError` naming ``field``."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        families = sorted({n.split(".")[1] for n in INSTANCE_TYPES})
        hint = ""
        if name in ("local", "local_gpu"):
            hint = "; 'local' is SageMaker local mode's pseudo type, name a real ml.* type instead"
        raise RequestError(
            field,
            f"unknown instance type {name!r}{hint}",
            allowed="ml.<family>.<size> for families " + ", ".join(families),
        ) from None
