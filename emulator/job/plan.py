"""Plan: request → SageMaker's view of every host. Pure: no filesystem, no ``os.environ``, no
subprocess.

A :class:`HostPlan` is what SageMaker itself decides for a host: its files under ``/opt/ml``, the
container's environment and command, and (predicted, for people reading ``plan``) the ``SM_*``
values and the launcher command the toolkit will build. The network (addresses, ``/etc/hosts``)
and how a host is made belong to the backend's launch spec (:mod:`emulator.backends.base`).

The environment of a host is built from an allowlist, as a container's is: the image's variables
(:class:`Runtime`), the platform's (``TRAINING_JOB_*``, ``AWS_REGION``),
the emulator's in-host switches (``EMULATOR_*``), the request's ``Environment``, and only those of
the caller's variables the request names in ``pass_env``. Nothing else of the caller's
environment reaches a host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..inhost import protocol as P
from . import frameworks
from . import toolkit_model as tk
from .distribution import Runner
from .instance_types import InstanceType
from .request import JobRequest


@dataclass(frozen=True)
class Runtime:
    """What the "image" of a backend provides, as planning needs it.

    ``python`` runs the toolkit and the user's code; ``train_command`` is what ``docker run IMAGE
    train`` runs; ``base_env`` is the environment a container of the image starts with (before
    the platform's variables); ``inhost_root`` is where the emulator's in-host folder is seen
    from inside a host; ``path`` is the image's ``PATH`` (without the in-host ``bin/``).
    """

    python: str
    train_command: tuple[str, ...]
    inhost_root: str
    base_env: Mapping[str, str]
    path: str
    gethostname_so: str | None = None  # the toolkit's LD_PRELOAD library, where it is known
    #: The sagemaker-training release that runs in the hosts (the launcher prediction follows
    #: it); None: not known (a user's image), no launcher is predicted.
    toolkit: str | None = tk.TOOLKIT_VERSION
    #: What ``AlgorithmSpecification.TrainingImage`` says when the request names no image and the
    #: hosts run none (:attr:`LaunchSpec.image`); None: the image the hosts run says it.
    training_image: str | None = None


#: The PyTorch DLC's image variables (its Dockerfile ``ENV``), set in every host.
DLC_ENV = {
    "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "UTF-8",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
#: Set unless the request forwards credentials: nothing in a host finds AWS credentials.
NO_CREDENTIALS_ENV = {
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
CREDENTIAL_NAMES = tk.CREDENTIAL_NAMES
#: The toolkit's runner, or "container": the request's own container command runs (SDK v3), not
#: the toolkit, so nothing is predicted.
PlanRunner = Runner | Literal["container"]
#: The runners that start ranks with ``mpirun`` over ssh (the hosts need sshd and keys).
SSH_RUNNERS: frozenset[str] = frozenset({"mpi", "smdataparallel"})


@dataclass(frozen=True)
class HostPlan:
    """One emulated host as SageMaker sets it up: identity, files, environment and commands."""

    name: str
    group: str
    instance_type: str
    gpus: int
    files: Mapping[str, str]  # path relative to /opt/ml → text
    dirs: Sequence[str]  # folders relative to /opt/ml to create
    env: Mapping[str, str]  # the container environment (before the backend adds its own)
    command: Sequence[str]  # the container command (``train``, or the request's entrypoint)
    sm_env: Mapping[str, str]  # what the toolkit will export (predicted)
    launcher: Sequence[str] | None  # what the toolkit will run (predicted); None: none predicted

    def gpu_memory(self) -> str:
        """What ``plan`` says of the emulated GPUs' memory: whether it is counted, and the capacity."""
        capacity = int(self.env.get(P.ENV_GPU_MEMORY, "0") or 0)
        model = self.env.get(P.ENV_GPU_MODEL, "")
        if self.env.get(P.ENV_GPU_MEMORY_MODE, "off") != "count":
            return (f"not counted (--gpu-memory count counts it): every query reports {capacity / (1 << 30):.2f} "
                    "GiB free")
        return (f"counted per GPU as CUDA's caching allocator would hold it; capacity {capacity / (1 << 30):.2f} GiB "
                f"per {model} (the type's total_memory as CUDA reports it, or --gpu-memory-gib), less an estimated "
                "300 MiB CUDA context; past it: CUDA's OutOfMemoryError")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "instance_group": self.group,
                "instance_type": self.instance_type, "emulated_gpus": self.gpus,
                **({"emulated_gpu_memory": self.gpu_memory()} if self.gpus else {}),
                "files": {f"{P.OPT_ML}/{k}": v for k, v in self.files.items()},
                "dirs": [f"{P.OPT_ML}/{d}" for d in self.dirs],
                "container_command": list(self.command), "toolkit_sm_env": dict(self.sm_env),
                "launcher_command": list(self.launcher) if self.launcher is not None else None}


@dataclass(frozen=True)
class JobPlan:
    request: JobRequest
    runner: PlanRunner
    runtime: Runtime
    hosts: tuple[HostPlan, ...]

    @property
    def uses_ssh(self) -> bool:
        """True when ranks start through ``mpirun`` over ssh, so every host needs ``sshd``."""
        return self.runner in SSH_RUNNERS

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request.to_dict(training_image=self.runtime.training_image), "runner": self.runner,
                "python": self.runtime.python, "hosts": [h.to_dict() for h in self.hosts]}


def resource_config(request: JobRequest, host: str) -> dict[str, Any]:
    """``resourceconfig.json`` for ``host``, in the real-job shape and key order.

    ``hosts`` is "sorted lexicographically" (AWS's documentation of the file; the toolkit's
    ``Environment.hosts`` docstring says the same), so from 10 hosts up it reads ``algo-1,
    algo-10, algo-11, …, algo-2``. Each instance group's ``hosts`` is sorted the same way, unless
    the request's ``host_order`` puts them in another order (a real ml.p4d.24xlarge job listed its
    group as ``["algo-2", "algo-1"]``); the top-level list stays sorted (its order in that job
    is not known). The toolkit takes the master (``torchrun --master_addr``, ``mpirun``'s first
    host) from the distribution group's ``hosts[0]``.
    """
    members, start = [], 0
    for g in request.instance_groups:
        members.append(request.hosts[start:start + g.count])
        start += g.count
    position = {h: i for i, h in enumerate(request.host_order)} if request.host_order else None
    groups = [{"instance_group_name": g.name, "instance_type": g.instance_type,
               "hosts": sorted(names, key=position.__getitem__) if position else sorted(names)}
              for g, names in zip(request.instance_groups, members)]
    group = request.group_of(host)
    return {"current_host": host, "current_instance_type": group.instance_type,
            "current_group_name": group.name, "hosts": sorted(request.hosts), "instance_groups": groups,
            "network_interface_name": P.INTERFACE, "topology": None}


def container_command(request: JobRequest, runtime: Runtime) -> list[str]:
    """``ContainerEntrypoint + ContainerArguments`` when the request has them, else ``train``."""
    return list(request.container_command or runtime.train_command)


def inhost_paths(runtime: Runtime, itype: InstanceType, *, smddp: bool) -> dict[str, str]:
    """``PATH`` and ``PYTHONPATH`` of a host of type ``itype``: the in-host folders that exist on
    that type (``nvidia-smi`` only with GPUs; ``smddprun`` and ``smdistributed`` only where the
    image ships SMDDP, ``smddp``: see :meth:`~emulator.job.request.JobRequest.has_smddp`), then the
    image's ``PATH``."""
    root = runtime.inhost_root
    bins = [P.INHOST_GPU_BIN] * itype.is_gpu + [P.INHOST_SMDDP_BIN] * smddp
    sites = [P.INHOST_SITE] + [P.INHOST_SMDDP_SITE] * smddp
    return {"PATH": ":".join([*(f"{root}/{b}" for b in bins), runtime.path]),
            "PYTHONPATH": ":".join(f"{root}/{s}" for s in sites)}


def common_env(request: JobRequest, runtime: Runtime, caller_env: Mapping[str, str]) -> dict[str, str]:
    """The environment every host's PID 1 starts with (see the module docstring); ``PATH`` and
    ``PYTHONPATH`` are those of the first group's type (:func:`inhost_paths`; ``build`` sets them
    per host)."""
    env = dict(runtime.base_env)
    env.update(DLC_ENV)
    first = request.instance_groups[0].type
    env.update({**inhost_paths(runtime, first, smddp=request.has_smddp(first)), "TMPDIR": "/tmp",
                P.ENV_INHOST: "1", P.ENV_DIAG_DIR: P.DIAG_DIR,
                P.ENV_DLC: frameworks.image_label(request.framework, first),
                P.ENV_DLC_GAPS: json.dumps(request.dlc_image.gap_modules(), sort_keys=True)})
    selection = request.framework
    if selection is not None and selection.family is not None:
        env[P.ENV_DLC_TORCH] = selection.family.torch
    env.update(NO_CREDENTIALS_ENV)
    if request.forward_aws_credentials:
        for k in NO_CREDENTIALS_ENV:
            env.pop(k)
        env.update({k: v for k, v in caller_env.items() if k in CREDENTIAL_NAMES})
    env.update({"TRAINING_JOB_NAME": request.job_name, "TRAINING_JOB_ARN": request.arn,
                "AWS_REGION": request.region})
    used = request.speedups()
    if used.short_toolkit_sleeps:
        env[P.ENV_SHORT_TOOLKIT_SLEEPS] = "1"
    if used.toolkit_skips_torch_import:
        env[P.ENV_TOOLKIT_SKIPS_TORCH_IMPORT] = "1"
    if used.fast_start:
        env[P.ENV_FAST_START] = "1"
    if request.smddp_strict:
        env[P.ENV_SMDDP_STRICT] = "1"
    env.update({k: caller_env[k] for k in request.pass_env if k in caller_env})
    env.update(request.environment)
    return env


def build(request: JobRequest, *, runtime: Runtime, caller_env: Mapping[str, str] | None = None,
          num_cpus: int = 1) -> JobPlan:
    """Plan every host of ``request``. Pure; ``caller_env`` is the environment of whoever asked
    (only ``pass_env`` names and, when forwarded, AWS credentials are read from it)."""
    caller = dict(caller_env or {})
    input_config = {c.name: c.config() for c in request.channels}
    hps = tk.Hyperparameters.of(request.hyperparameters)  # decoded once, read by the toolkit model
    runner: PlanRunner = "container" if request.container_command else hps.runner
    common = common_env(request, runtime, caller)
    command = container_command(request, runtime)
    plans = []
    for host in request.hosts:
        group = request.group_of(host)
        gpus = request.gpus_on(host)
        rc = resource_config(request, host)
        files = {
            "input/config/resourceconfig.json": json.dumps(rc),
            "input/config/hyperparameters.json": json.dumps(dict(request.hyperparameters)),
            "input/config/inputdataconfig.json": json.dumps(input_config),
        }
        if request.checkpoint_dir is not None:
            files["input/config/checkpointconfig.json"] = json.dumps(
                {"LocalPath": request.checkpoint_local_path, "S3Uri": request.checkpoint_dir.as_uri()})
        dirs = ["code", "model", "output/data", "input/data"]
        dirs += [f"input/data/{c.name}" for c in request.channels]
        if request.checkpoint_local_path.startswith(f"{P.OPT_ML}/"):
            dirs.append(request.checkpoint_local_path[len(P.OPT_ML) + 1:].rstrip("/"))
        env = dict(common)
        env.update({k: v for k, v in inhost_paths(runtime, group.type, smddp=request.has_smddp(group.type)).items()
                    if k not in request.environment})
        env[P.ENV_GPU_COUNT] = str(gpus)
        env[P.ENV_GPU_MODEL] = group.type.gpu_model
        env[P.ENV_GPU_MEMORY] = str(request.gpu_capacity(group.type))
        if request.gpu_memory != "off":
            env[P.ENV_GPU_MEMORY_MODE] = request.gpu_memory
        toolkit = runner != "container"
        toolkit_runner: Runner = "process" if runner == "container" else runner
        plans.append(HostPlan(
            name=host, group=group.name, instance_type=group.instance_type, gpus=gpus, files=files,
            dirs=dirs, env=env, command=command,
            sm_env=tk.sm_env(rc, hps, input_config, num_gpus=gpus,
                             num_cpus=num_cpus, framework_module=env["SAGEMAKER_TRAINING_MODULE"])
            if toolkit else {},
            launcher=tk.launcher_command(toolkit_runner, rc, hps, num_gpus=gpus,
                                         python=runtime.python, input_config=input_config,
                                         credentials=[k for k in CREDENTIAL_NAMES if k in env],
                                         smddprun=request.has_smddp(group.type),
                                         gethostname_so=runtime.gethostname_so or tk.GETHOSTNAME_SO,
                                         toolkit=runtime.toolkit)
            if toolkit else None,
        ))
    return JobPlan(request=request, runner=runner, runtime=runtime, hosts=tuple(plans))
