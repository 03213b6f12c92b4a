"""What the pinned toolkit (sagemaker-training 5.1.4, sagemaker-pytorch-training 3.0.0) will
compute inside a host, predicted from the host's config files: ``SM_*`` values and the launcher
command. Used by ``plan`` (nothing runs there). Written from the reference, not copied; the tests
compare it with the real toolkit, which stays the authority at run time.

Not predicted: ``SM_TRAINING_ENV`` and ``PYTHONPATH`` (both depend on the interpreter in the
host) and ``SM_NUM_CPUS`` beyond this machine's count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .distribution import DISTRIBUTION_FLAGS, Runner, decode

#: Hyperparameters the toolkit treats as its own (TK params.SAGEMAKER_HYPERPARAMETERS).
TOOLKIT_HPS = frozenset({
    "sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name",
    "sagemaker_default_user_module_name", "_tuning_objective_metric", "sagemaker_s3_output",
})
MASTER_PORT = "7777"
BASE = "/opt/ml"


def env_value(value: Any) -> str:
    """Format one value as ``mapping.to_env_vars`` does: raw str, "" for None, else compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def cmd_args(hps: Mapping[str, Any]) -> list[str]:
    """User hyperparameters as the toolkit's command-line arguments (``mapping.to_cmd_args``)."""
    out: list[str] = []
    for key in sorted(hps):
        out.append(f"--{key}" if len(key) > 1 else f"-{key}")
        value = hps[key]
        if hasattr(value, "items"):
            out.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            out.append("" if value is None else str(value))
    return out


def split_hyperparameters(raw: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user hyperparameters, additional framework parameters), both decoded."""
    decoded = {k: decode(v) for k, v in raw.items()}
    user = {k: v for k, v in decoded.items()
            if k not in TOOLKIT_HPS and not k.startswith("sagemaker_")}
    framework = {k: v for k, v in decoded.items()
                 if k.startswith("sagemaker_") and k not in TOOLKIT_HPS}
    return user, framework


def distribution_groups(rc: Mapping[str, Any], framework: Mapping[str, Any]) -> list[str]:
    if "sagemaker_distribution_instance_groups" in framework:
        return list(framework["sagemaker_distribution_instance_groups"])
    if any(framework.get(flag) for flag in DISTRIBUTION_FLAGS):
        return [rc.get("current_group_name", "homogeneousCluster")]
    return []


def distribution_hosts(rc: Mapping[str, Any], framework: Mapping[str, Any]) -> list[str]:
    groups = rc.get("instance_groups")
    if not groups:
        return list(rc["hosts"])
    wanted = distribution_groups(rc, framework)
    return [h for g in groups if g["instance_group_name"] in wanted for h in g["hosts"]]


def processes_per_host(framework: Mapping[str, Any], gpus: int) -> int:
    pph = framework.get("sagemaker_mpi_num_of_processes_per_host")
    if pph:
        return int(pph)
    return gpus if gpus > 0 else 1


def sm_env(rc: Mapping[str, Any], hyperparameters: Mapping[str, str], input_config: Mapping[str, Any],
           *, num_gpus: int, num_cpus: int, framework_module: str = "") -> dict[str, str]:
    """The ``SM_*`` variables, in the toolkit's emission order (without SM_TRAINING_ENV)."""
    user, framework = split_hyperparameters(hyperparameters)
    raw_entry = decode(hyperparameters.get("sagemaker_program", '""'))
    entry = str(raw_entry)
    groups = rc.get("instance_groups", [])
    group = rc.get("current_group_name", "homogeneousCluster")
    channels = sorted(input_config)
    env: dict[str, Any] = {
        "hosts": rc["hosts"],
        "network_interface_name": rc.get("network_interface_name", "eth0"),
        "hps": user,
        "user_entry_point": entry,
        "framework_params": framework,
        "resource_config": dict(rc),
        "input_data_config": dict(input_config),
        "output_data_dir": f"{BASE}/output/data",
        "channels": channels,
        "current_host": rc["current_host"],
        "current_instance_type": rc.get("current_instance_type", "local"),
        "current_instance_group": group,
        "current_instance_group_hosts": next(
            (g["hosts"] for g in groups if g["instance_group_name"] == group), []),
        "instance_groups": [g["instance_group_name"] for g in groups],
        "instance_groups_dict": {g["instance_group_name"]: g for g in groups},
        "distribution_instance_groups": distribution_groups(rc, framework),
        "is_hetero": len(groups) > 1,
        "module_name": entry[:-3] if entry.endswith(".py") else entry,
        "log_level": decode(hyperparameters.get("sagemaker_container_log_level", "20")),
        "framework_module": framework_module,
        "input_dir": f"{BASE}/input",
        "input_config_dir": f"{BASE}/input/config",
        "output_dir": f"{BASE}/output",
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "model_dir": f"{BASE}/model",
        "module_dir": decode(hyperparameters.get("sagemaker_submit_directory", f'"{BASE}/code"')),
        "user_args": cmd_args(user),
        "output_intermediate_dir": f"{BASE}/output/intermediate",
    }
    for name in input_config:
        env[f"channel_{name}"] = f"{BASE}/input/data/{name}"
    for key, value in user.items():
        env[f"hp_{key}"] = value
    return {f"SM_{k.upper()}": env_value(v) for k, v in env.items()}


def launcher_command(runner: Runner, rc: Mapping[str, Any], hyperparameters: Mapping[str, str], *,
                     num_gpus: int, python: str) -> list[str] | None:
    """The command the toolkit's runner will start on this host; None where it starts none
    (MPI-family workers, which wait for ``orted``)."""
    user, framework = split_hyperparameters(hyperparameters)
    entry = str(decode(hyperparameters.get("sagemaker_program", '""')))
    args = cmd_args(user)
    pph = processes_per_host(framework, num_gpus)
    current = rc["current_host"]
    if runner == "torch_distributed":
        hosts = distribution_hosts(rc, framework) or [current]
        cmd = ["torchrun", "--nnodes", str(len(hosts)), "--nproc_per_node", str(pph)]
        if len(hosts) > 1:
            cmd += ["--master_addr", hosts[0], "--master_port", MASTER_PORT,
                    "--node_rank", str(hosts.index(current))]
        return [*cmd, entry, *args]
    if runner in ("mpi", "smdataparallel"):
        hosts = distribution_hosts(rc, framework) or [current]
        if current != hosts[0]:
            return None
        return mpirun_command(runner, hosts, framework, rc, pph=pph, entry=entry, args=args)
    if entry.endswith(".sh") or not entry.endswith(".py"):
        return ["/bin/sh", "-c", f"./{entry} {' '.join(args)}".strip()]
    return [python, "--", entry, *args]


def mpirun_command(runner: Runner, hosts: Sequence[str], framework: Mapping[str, Any],
                   rc: Mapping[str, Any], *, pph: int, entry: str, args: Sequence[str]) -> list[str]:
    """The head of the MPI-family ``mpirun`` command (placement and rank program).

    Only the parts that decide placement and the rank program are predicted here; the full argv
    (every ``-x``/``-mca``) is whatever the real toolkit logs in ``algo-1``'s log.
    """
    host_list = list(hosts) if pph == 1 else [f"{h}:{pph}" for h in hosts]
    nprocs = framework.get("sagemaker_mpi_num_processes") or pph * len(hosts)
    return ["mpirun", "--host", ",".join(host_list), "-np", str(nprocs), "...",
            "python", "-m", "mpi4py", entry, *args]
