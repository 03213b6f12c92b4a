"""What the toolkit (sagemaker-training 5.1.x, sagemaker-pytorch-training 3.0.0) will compute
inside a host, predicted from the host's config files: ``SM_*`` values and the launcher command.
Used by ``plan`` (nothing runs there). Written from the reference, not copied; the tests compare
it with the real toolkit, which stays the authority at run time.

The launcher follows the toolkit version that runs in the host (``toolkit=``; default the
emulator's pin, 5.1.4). The framework images of the DLC families 2.11 to 2.13 hold 5.1.1, which
launches differently (the released 5.1.1 to 5.1.4 sources, compared):

- up to 5.1.2, the toolkit runs the command through ``asyncio.create_subprocess_shell(" ".join(
  cmd))`` whenever it captures stderr (the default; always for ``torch_distributed``), so the
  process it starts is ``/bin/sh -c "<cmd joined by spaces>"`` and the shell parses the
  hyperparameters again; with ``sagemaker_toolkit_native_launcher_enabled`` the other runners
  ``Popen`` the list (after stripping ``"`` from its last item). 5.1.3 and later exec the list;
- a Python script runs as ``python -- script.py`` from 5.1.4 on, ``python script.py`` before;
- a shell entry point is ``/bin/sh -c '"./script.sh args"'`` (with the quotes) up to 5.1.2;
- 5.1.1's EFA instance lists lack ``ml.p5e.48xlarge`` (NCCL) and ``ml.p5.48xlarge``/
  ``ml.p5e.48xlarge`` (RDMA).

``toolkit=None`` (an image whose toolkit is not known) predicts no launcher. ``SM_*`` values are
the same in every 5.1.x release. Not predicted: ``SM_TRAINING_ENV`` and ``PYTHONPATH`` (both
depend on the interpreter in the host) and ``SM_NUM_CPUS`` beyond this machine's count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..inhost.protocol import OPT_ML
from .distribution import DISTRIBUTION_FLAGS, Runner, decode, runner_of

#: Hyperparameters the toolkit treats as its own (TK params.SAGEMAKER_HYPERPARAMETERS).
TOOLKIT_HPS = frozenset({
    "sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
    "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name",
    "sagemaker_default_user_module_name", "_tuning_objective_metric", "sagemaker_s3_output",
})
MASTER_PORT = "7777"
BASE = OPT_ML
#: The sagemaker-training release the emulator pins (this machine's and the default image's).
TOOLKIT_VERSION = "5.1.4"
#: First releases with each launch change (see the module docstring).
EXEC_SINCE = (5, 1, 3)  # create_subprocess_exec instead of a shell; no quotes in ``sh -c``
DASHDASH_SINCE = (5, 1, 4)  # ``python -- script.py``
EFA_LISTS_SINCE = (5, 1, 2)  # ml.p5e.48xlarge (NCCL), ml.p5/p5e.48xlarge (RDMA)


def toolkit_release(version: str) -> tuple[int, ...]:
    """``"5.1.1"`` -> (5, 1, 1); pre-release and local parts are ignored (``5.1.1.dev0``)."""
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


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


@dataclass(frozen=True)
class Hyperparameters:
    """A job's hyperparameters as the toolkit reads them, decoded once (:meth:`of`).

    The toolkit's decoded view of what the SDK sends (every value a JSON string): each value
    ``json.loads``-ed, else the raw string (TK ``environment.read_hyperparameters``), split into
    the user's hyperparameters and the additional framework parameters (TK ``environment.py``).
    """

    #: Every value, decoded.
    values: Mapping[str, Any]
    #: The user's hyperparameters (not ``sagemaker_*``, not the toolkit's own).
    user: Mapping[str, Any]
    #: ``sagemaker_*`` values that are not the toolkit's own (``framework_params``).
    framework: Mapping[str, Any]

    @classmethod
    def of(cls, wire: Mapping[str, str] | Hyperparameters) -> Hyperparameters:
        """The decoded view of ``wire`` (a view is returned as it is: nothing is decoded twice)."""
        if isinstance(wire, Hyperparameters):
            return wire
        values = {k: decode(v) for k, v in wire.items()}
        return cls(values=values,
                   user={k: v for k, v in values.items() if k not in TOOLKIT_HPS and not k.startswith("sagemaker_")},
                   framework={k: v for k, v in values.items() if k.startswith("sagemaker_") and k not in TOOLKIT_HPS})

    @property
    def entry(self) -> str:
        """``sagemaker_program`` (the user entry point; "" when absent)."""
        return str(self.values.get("sagemaker_program", ""))

    @property
    def runner(self) -> Runner:
        """The PyTorch toolkit's runner for a host in the distribution group (PTK ``training.py``)."""
        return runner_of(self.values)


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


def sm_env(rc: Mapping[str, Any], hyperparameters: Mapping[str, str] | Hyperparameters,
           input_config: Mapping[str, Any], *, num_gpus: int, num_cpus: int,
           framework_module: str = "") -> dict[str, str]:
    """The ``SM_*`` variables, in the toolkit's emission order (without SM_TRAINING_ENV)."""
    hps = Hyperparameters.of(hyperparameters)
    user, framework, entry = hps.user, hps.framework, hps.entry
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
        "log_level": hps.values.get("sagemaker_container_log_level", 20),
        "framework_module": framework_module,
        "input_dir": f"{BASE}/input",
        "input_config_dir": f"{BASE}/input/config",
        "output_dir": f"{BASE}/output",
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "model_dir": f"{BASE}/model",
        "module_dir": hps.values.get("sagemaker_submit_directory", f"{BASE}/code"),
        "user_args": cmd_args(user),
        "output_intermediate_dir": f"{BASE}/output/intermediate",
    }
    for name in input_config:
        env[f"channel_{name}"] = f"{BASE}/input/data/{name}"
    for key, value in user.items():
        env[f"hp_{key}"] = value
    return {f"SM_{k.upper()}": env_value(v) for k, v in env.items()}


#: Instance types for which the pinned toolkit adds EFA variables to ``mpirun`` (a fact of
#: sagemaker-training 5.1.4, ``SM_EFA_NCCL_INSTANCES`` / ``SM_EFA_RDMA_INSTANCES``; 5.1.1's lack
#: what :data:`EFA_LISTS_SINCE` added).
EFA_NCCL_INSTANCES = frozenset({
    "ml.g4dn.8xlarge", "ml.g4dn.12xlarge", "ml.g5.48xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge",
    "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.trn1.32xlarge",
    "ml.p6e-gb200.36xlarge",
})
EFA_RDMA_INSTANCES = frozenset({
    "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.trn1.32xlarge",
    "ml.p6e-gb200.36xlarge",
})
#: Stands for the path of the toolkit's ``gethostname`` extension, which depends on the
#: interpreter inside the host (``<site-packages>/gethostname.cpython-*.so``).
GETHOSTNAME_SO = "<site-packages>/gethostname.so"
CREDENTIAL_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SMDATAPARALLEL_SERVER_PORT = "7592"


def launcher_command(runner: Runner, rc: Mapping[str, Any], hyperparameters: Mapping[str, str] | Hyperparameters, *,
                     num_gpus: int, python: str, input_config: Mapping[str, Any] | None = None,
                     credentials: Sequence[str] = (), smddprun: bool = True,
                     gethostname_so: str = GETHOSTNAME_SO,
                     toolkit: str | None = TOOLKIT_VERSION) -> list[str] | None:
    """The command the toolkit's runner will start on this host; None where it starts none
    (MPI-family workers, which wait for ``orted``) or the ``toolkit`` version is not known. For
    the MPI family see :func:`mpirun_command` (``input_config`` names the ``SM_CHANNEL_*``
    variables MPI exports; ``credentials`` the AWS credential variables set in the host)."""
    if toolkit is None:
        return None
    release = toolkit_release(toolkit)
    hps = Hyperparameters.of(hyperparameters)
    user, framework, entry = hps.user, hps.framework, hps.entry
    args = cmd_args(user)
    pph = processes_per_host(framework, num_gpus)
    current = rc["current_host"]
    cmd: list[str]
    if runner == "torch_distributed":
        hosts = distribution_hosts(rc, framework) or [current]
        cmd = ["torchrun", "--nnodes", str(len(hosts)), "--nproc_per_node", str(pph)]
        if len(hosts) > 1:
            cmd += ["--master_addr", hosts[0], "--master_port", MASTER_PORT,
                    "--node_rank", str(hosts.index(current))]
        cmd = [*cmd, entry, *args]
    elif runner in ("mpi", "smdataparallel"):
        hosts = distribution_hosts(rc, framework) or [current]
        if current != hosts[0]:
            return None
        names = list(sm_env(rc, hps, input_config or {}, num_gpus=num_gpus, num_cpus=1))
        cmd = mpirun_command(runner, hosts, framework, rc, pph=pph, entry=entry, args=args,
                             python=python, sm_names=names, credentials=credentials,
                             smddprun=smddprun, gethostname_so=gethostname_so, toolkit=toolkit)
    elif entry.endswith(".sh") or not entry.endswith(".py"):
        script = f"./{entry} {' '.join(args)}".strip()
        cmd = ["/bin/sh", "-c", script if release >= EXEC_SINCE else f'"{script}"']
    else:
        cmd = [python, *(["--"] if release >= DASHDASH_SINCE else []), entry, *args]
    if release >= EXEC_SINCE:
        return cmd
    # Up to 5.1.2: a shell when stderr is captured (always for torchrun: the toolkit passes
    # run(wait, capture_error) positionally to its run(capture_error, wait)).
    if runner == "torch_distributed" or not framework.get("sagemaker_toolkit_native_launcher_enabled"):
        return ["/bin/sh", "-c", " ".join(cmd)]
    return [*cmd[:-1], cmd[-1].strip('"')]


def _custom_mpi_options(text: str) -> tuple[str, list[str]]:
    """(NCCL_DEBUG, other tokens): ``--NCCL_DEBUG X`` / ``--NCCL_DEBUG=X`` override the default
    ``INFO``; every other token is kept in order (argparse abbreviations are not modelled)."""
    tokens, rest, debug = text.split(), [], "INFO"
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--NCCL_DEBUG" and i + 1 < len(tokens):
            debug, i = tokens[i + 1], i + 2
            continue
        if tok.startswith("--NCCL_DEBUG="):
            debug = tok.split("=", 1)[1]
        else:
            rest.append(tok)
        i += 1
    return debug, rest


def _x(*pairs: str) -> list[str]:
    return [a for p in pairs for a in ("-x", p)]


def mpirun_command(runner: Runner, hosts: Sequence[str], framework: Mapping[str, Any],
                   rc: Mapping[str, Any], *, pph: int, entry: str, args: Sequence[str],
                   python: str = "python", sm_names: Sequence[str] = (),
                   credentials: Sequence[str] = (), smddprun: bool = True,
                   gethostname_so: str = GETHOSTNAME_SO, toolkit: str = TOOLKIT_VERSION) -> list[str]:
    """The full ``mpirun`` argv the pinned toolkit's MPI runner (``runner == "mpi"``) or
    SMDataParallel runner (``"smdataparallel"``, also used for ``pytorchddp``) builds on the master.

    ``sm_names`` are the ``SM_*`` names in the toolkit's emission order (without
    ``SM_TRAINING_ENV``, which is placed as the toolkit places it); the MPI runner exports each
    with ``-x``. ``smddprun``: whether ``which smddprun`` succeeds in the host (the emulator's
    stand-in is always on ``PATH``). Not modelled: model parallelism (``smddpmprun``, extra NCCL
    variables) and PYTHON_PACKAGE/shell entry points (predicted as a ``.py`` script).
    """
    instance_type = str(framework.get("sagemaker_instance_type") or rc.get("current_instance_type"))
    iface = str(rc.get("network_interface_name", "eth0"))
    efa_nccl, efa_rdma = EFA_NCCL_INSTANCES, EFA_RDMA_INSTANCES
    if toolkit_release(toolkit) < EFA_LISTS_SINCE:
        efa_nccl, efa_rdma = efa_nccl - {"ml.p5e.48xlarge"}, efa_rdma - {"ml.p5.48xlarge", "ml.p5e.48xlarge"}
    rank_program = [python, "-m", "mpi4py", entry, *args]
    if runner == "mpi":
        debug, extra = _custom_mpi_options(str(framework.get("sagemaker_mpi_custom_mpi_options", "")))
        host_list = list(hosts) if pph == 1 else [f"{h}:{pph}" for h in hosts]
        nprocs = framework.get("sagemaker_mpi_num_processes") or pph * len(hosts)
        cmd = ["mpirun", "--host", ",".join(host_list), "-np", str(nprocs), "--allow-run-as-root",
               "--display-map", "--tag-output", "-mca", "btl_tcp_if_include", iface,
               "-mca", "oob_tcp_if_include", iface, "-mca", "plm_rsh_no_tree_spawn", "1",
               "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
               "-mca", "orte_abort_on_non_zero_status", "1",
               "-mca", "btl_vader_single_copy_mechanism", "none",
               *_x("NCCL_MIN_NRINGS=4", f"NCCL_SOCKET_IFNAME={iface}", f"NCCL_DEBUG={debug}",
                   "LD_LIBRARY_PATH", "PATH", f"LD_PRELOAD={gethostname_so}"), *extra]
        if instance_type in efa_nccl:
            cmd += _x("FI_PROVIDER=efa", "NCCL_PROTO=simple")
        if instance_type in efa_rdma:
            cmd += _x("FI_EFA_USE_DEVICE_RDMA=1")
        cmd += _x(*[c for c in CREDENTIAL_NAMES if c in credentials])
        names = list(sm_names)
        if "SM_TRAINING_ENV" not in names:
            at = names.index("SM_MODULE_DIR") + 1 if "SM_MODULE_DIR" in names else len(names)
            names.insert(at, "SM_TRAINING_ENV")
        return [*cmd, *_x(*names, "PYTHONPATH"), *rank_program]
    debug, extra = _custom_mpi_options(
        str(framework.get("sagemaker_distributed_dataparallel_custom_mpi_options", "")))
    multi = len(hosts) > 1
    host_list = [f"{h}:{pph}" for h in hosts] if multi else list(hosts)
    cmd = ["mpirun", "--host", ",".join(host_list), "-np", str(pph * len(hosts)),
           "--allow-run-as-root", "--tag-output", "--oversubscribe",
           "-mca", "btl_tcp_if_include", iface, "-mca", "oob_tcp_if_include", iface,
           "-mca", "plm_rsh_no_tree_spawn", "1", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
           "-mca", "orte_abort_on_non_zero_status", "1",
           "-mca", "btl_vader_single_copy_mechanism", "none",
           "-mca", "plm_rsh_num_concurrent", str(len(hosts)),
           *_x(f"NCCL_SOCKET_IFNAME={iface}", f"NCCL_DEBUG={debug}", "LD_LIBRARY_PATH", "PATH",
               "SMDATAPARALLEL_USE_HOMOGENEOUS=1" if multi else "SMDATAPARALLEL_USE_SINGLENODE=1",
               "FI_PROVIDER=efa", "RDMAV_FORK_SAFE=1", f"LD_PRELOAD={gethostname_so}"), *extra]
    if instance_type in efa_nccl:
        cmd += _x("NCCL_PROTO=simple")
    if instance_type in efa_rdma:
        cmd += _x("FI_EFA_USE_DEVICE_RDMA=1")
    if multi:
        cmd += _x(f"SMDATAPARALLEL_SERVER_ADDR={hosts[0]}",
                  f"SMDATAPARALLEL_SERVER_PORT={SMDATAPARALLEL_SERVER_PORT}",
                  f"SAGEMAKER_INSTANCE_TYPE={instance_type}")
    return [*cmd, *(["smddprun"] if smddprun else []), *rank_program]
