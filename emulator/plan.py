"""Plan: request → one plan per host. Pure: no filesystem, no ``os.environ``, no subprocess.

Everything a host needs is computed here from the request and the few facts about this machine
the caller passes in (``base_env``, where the in-host package is seen from inside, the container
command). ``python -m emulator plan`` prints the result; golden tests compare it.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import toolkit_model as tk
from .distribution import Runner, runner_for
from .request import JobRequest

#: Variables never passed from this machine into a host: credentials, and launcher state that
#: would make ranks think they are already launched.
_BLOCKED_PREFIXES = ("AWS_", "SM_", "SAGEMAKER_", "TRAINING_JOB_", "OMPI_", "PMIX_", "TORCHELASTIC_",
                     "PYTEST_", "EMULATOR_", "SMDATAPARALLEL_")
_BLOCKED_NAMES = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                            "ROLE_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
                            "PYTHONPATH", "PYTHONHOME", "BOTO_CONFIG", "VIRTUAL_ENV_PROMPT",
                            "CURRENT_HOST", "PL_TORCH_DISTRIBUTED_BACKEND", "OPAL_PREFIX",
                            "COV_CORE_SOURCE", "COV_CORE_CONFIG", "COV_CORE_DATAFILE"})
DLC_ENV = {
    "SAGEMAKER_TRAINING_MODULE": "sagemaker_pytorch_container.training:main",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "UTF-8",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}
NO_CREDENTIALS_ENV = {
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
CREDENTIAL_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
INTERFACE = "eth0"


def host_safe_env(env: Mapping[str, str]) -> dict[str, str]:
    """This machine's environment minus credentials and launcher variables (see module doc)."""
    return {k: v for k, v in env.items()
            if not k.startswith(_BLOCKED_PREFIXES) and k not in _BLOCKED_NAMES}


@dataclass(frozen=True)
class HostPlan:
    """One emulated host: identity, files under ``/opt/ml``, environment and commands."""

    name: str
    address: str
    group: str
    instance_type: str
    gpus: int
    files: Mapping[str, str]  # path relative to /opt/ml → text
    dirs: Sequence[str]  # folders relative to /opt/ml to create
    env: Mapping[str, str]  # the container environment
    command: Sequence[str]  # the container command ("train")
    sm_env: Mapping[str, str]  # what the toolkit will export (predicted)
    launcher: Sequence[str] | None  # what the toolkit will run (predicted); None: MPI worker

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "address": self.address, "instance_group": self.group,
                "instance_type": self.instance_type, "emulated_gpus": self.gpus,
                "files": {f"/opt/ml/{k}": v for k, v in self.files.items()},
                "dirs": [f"/opt/ml/{d}" for d in self.dirs], "environment": dict(self.env),
                "container_command": list(self.command), "toolkit_sm_env": dict(self.sm_env),
                "launcher_command": list(self.launcher) if self.launcher is not None else None}


@dataclass(frozen=True)
class JobPlan:
    request: JobRequest
    runner: Runner
    subnet: str
    hosts: tuple[HostPlan, ...] = field(default_factory=tuple)

    @property
    def hosts_file(self) -> str:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{h.address}\t{h.name}" for h in self.hosts]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"request": self.request.to_dict(), "runner": self.runner, "network": self.subnet,
                "hosts_file": self.hosts_file, "hosts": [h.to_dict() for h in self.hosts]}


def resource_config(request: JobRequest, host: str) -> dict[str, Any]:
    """``resourceconfig.json`` for ``host``, in the real-job shape and key order."""
    hosts = request.hosts
    groups, start = [], 0
    for g in request.instance_groups:
        groups.append({"instance_group_name": g.name, "instance_type": g.instance_type,
                       "hosts": hosts[start:start + g.count]})
        start += g.count
    group = request.group_of(host)
    return {"current_host": host, "current_instance_type": group.instance_type,
            "current_group_name": group.name, "hosts": hosts, "instance_groups": groups,
            "network_interface_name": INTERFACE, "topology": None}


def build(request: JobRequest, *, base_env: Mapping[str, str], inhost_root: str,
          train_command: Sequence[str], python: str = "python3", num_cpus: int = 1,
          diag_dir: str | None = None, subnet: str = "10.0.0.0/24",
          aws_credentials: Mapping[str, str] | None = None, extra_path: Sequence[str] = (),
          gethostname_so: str | None = None) -> JobPlan:
    """Plan every host of ``request``. Pure; see the module docstring."""
    net = ipaddress.ip_network(subnet)
    addresses = [str(a) for a in list(net.hosts())[1:request.host_count + 1]]
    input_config = {c.name: c.config() for c in request.channels}
    runner = runner_for(request.hyperparameters)
    common = dict(host_safe_env(base_env))
    path = ":".join([f"{inhost_root}/bin", *extra_path, *([common["PATH"]] if common.get("PATH") else [])])
    common.update(DLC_ENV)
    common.update({"PATH": path, "PYTHONPATH": f"{inhost_root}/site", "TMPDIR": "/tmp",
                   "EMULATOR_INHOST": "1"})
    if diag_dir:
        common["EMULATOR_DIAG_DIR"] = diag_dir
    common.update(NO_CREDENTIALS_ENV)
    if request.forward_aws_credentials and aws_credentials:
        for k in NO_CREDENTIALS_ENV:
            common.pop(k)
        common.update({k: v for k, v in aws_credentials.items() if k in CREDENTIAL_NAMES})
    common.update({"TRAINING_JOB_NAME": request.job_name, "TRAINING_JOB_ARN": request.arn,
                   "AWS_REGION": request.region})
    if request.short_toolkit_sleeps:
        common["EMULATOR_SHORT_TOOLKIT_SLEEPS"] = "1"
    if request.fast_start:
        common["EMULATOR_FAST_START"] = "1"
    common.update(request.environment)
    plans = []
    for host, address in zip(request.hosts, addresses):
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
        if request.checkpoint_local_path.startswith("/opt/ml/"):
            dirs.append(request.checkpoint_local_path[len("/opt/ml/"):].rstrip("/"))
        env = dict(common)
        env["EMULATOR_GPU_COUNT"] = str(gpus)
        env["EMULATOR_GPU_MODEL"] = group.type.gpu_model
        plans.append(HostPlan(
            name=host, address=address, group=group.name, instance_type=group.instance_type,
            gpus=gpus, files=files, dirs=dirs, env=env,
            # --- sdk3 prototype (lead: fold into the rewrite): the request's container command
            # (ContainerEntrypoint + ContainerArguments, SDK v3) is PID 1, else the image's train.
            command=list(request.container_command or train_command),
            # --- end sdk3 prototype
            sm_env=tk.sm_env(rc, request.hyperparameters, input_config, num_gpus=gpus,
                             num_cpus=num_cpus, framework_module=env["SAGEMAKER_TRAINING_MODULE"]),
            launcher=tk.launcher_command(runner, rc, request.hyperparameters, num_gpus=gpus,
                                         python=python, input_config=input_config,
                                         credentials=[k for k in CREDENTIAL_NAMES if k in env],
                                         gethostname_so=gethostname_so or tk.GETHOSTNAME_SO),
        ))
    return JobPlan(request=request, runner=runner, subnet=subnet, hosts=tuple(plans))
