"""The same rank-environment dump on the process and docker backends, for every distribution.

Fails on any difference that is not in ``DOCUMENTED`` (the list of backend differences in
``docs/guides/docker.md``). ``test_comparison_catches_a_changed_variable`` proves the comparison
can fail.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import emulator

SCRIPTS = Path(__file__).parents[1] / "scripts"
DISTRIBUTIONS = {
    "plain": None,
    "torch_distributed": {"torch_distributed": {"enabled": True}},
    "pytorchddp": {"pytorchddp": {"enabled": True}},
    "smdistributed": {"smdistributed": {"dataparallel": {"enabled": True}}},
    "mpi": {"mpi": {"enabled": True, "processes_per_host": 2}},
}
#: What a rank sees of the platform and the launch: compared between backends.
COMPARED = re.compile(r"^(SM_|SAGEMAKER_|TRAINING_JOB_|AWS_|OMPI_COMM_WORLD_|NCCL_|SMDATAPARALLEL_|FI_|RDMAV_|"
                      r"EMULATOR_|TORCHELASTIC_|MASTER_|CURRENT_HOST$|RANK$|WORLD_SIZE$|LOCAL_RANK$|"
                      r"LOCAL_WORLD_SIZE$|GROUP_RANK$|GROUP_WORLD_SIZE$|ROLE_|GLOO_|PYTHONUNBUFFERED$|LC_ALL$)")
#: Documented differences (``docs/guides/docker.md``): name → why it may differ or be missing.
DOCUMENTED = {
    "SM_TRAINING_ENV": "holds interpreter-specific paths of the host's Python",
    "TORCHELASTIC_RUN_ID": "random per launch",
    "TORCHELASTIC_ERROR_FILE": "a temp path chosen by torchrun",
    "TORCHELASTIC_USE_AGENT_STORE": "torchrun internals",
    "EMULATOR_DIAG_DIR": "same path; listed for clarity",
}


def dumps(result: emulator.JobResult) -> dict[str, dict[str, Any]]:  # type: ignore[name-defined]
    return {name: json.loads(data) for name, data in result.model_files().items() if name.startswith("env-")}


def compare(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Differences between two sets of dumps that are not documented."""
    problems = []
    if set(a) != set(b):
        return [f"different ranks: {sorted(a)} vs {sorted(b)}"]
    for name in sorted(a):
        da, db = a[name], b[name]
        for key in ("hostname", "cwd", "opt_ml", "config"):
            if da[key] != db[key]:
                problems.append(f"{name}: {key} {da[key]!r} != {db[key]!r}")
        # each job network is a /24 of its own (a concurrent docker job may hold 10.0.0.0/24):
        # algo-N must resolve to the same host number of it on both backends
        ra, rb = (_host_numbers(d["resolves"]) for d in (da, db))
        if ra != rb:
            problems.append(f"{name}: resolves {da['resolves']!r} != {db['resolves']!r}")
        keys = {k for k in (*da["env"], *db["env"]) if COMPARED.match(k)}
        for key in sorted(keys - set(DOCUMENTED)):
            va, vb = da["env"].get(key), db["env"].get(key)
            if va != vb:
                problems.append(f"{name}: {key} {va!r} != {vb!r}")
    return problems


def _host_numbers(resolved: Mapping[str, str]) -> dict[str, int]:
    return {name: int(ipaddress.ip_address(address)) & 0xFF for name, address in resolved.items()}


def run(backend: str, dist: Any, out: Path, name: str) -> emulator.JobResult:  # type: ignore[name-defined]
    result = emulator.run(backend=backend, entry_point="env_dump.py", source_dir=SCRIPTS, instance_count=2,
                          instance_type="ml.p4d.24xlarge", gpus_per_host=2, distribution=dist,
                          hyperparameters={"msg": "a b; c"}, output_path=out / backend,
                          job_name=f"xb-{name}".replace("_", "-"),
                          echo=False, stop_grace=2, profile="ci")
    assert result.status == "Completed", (backend, result.failure_reason, result.log_tail("algo-1", 30))
    return result


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_rank_environment_is_the_same_on_both_backends(name: str, tmp_path: Path, docker_ready: None) -> None:
    dist = DISTRIBUTIONS[name]
    on_docker = run("docker", dist, tmp_path, name)
    if name in ("pytorchddp", "smdistributed", "mpi"):  # the toolkit's real mpirun, over ssh
        assert "mpirun --host algo-1:2,algo-2:2 -np 4 --allow-run-as-root" in on_docker.log("algo-1")
    process = dumps(run("process", dist, tmp_path, name))
    docker = dumps(on_docker)
    assert process, "no rank wrote its dump"
    assert len(process) == (2 if name == "plain" else 4)
    assert compare(process, docker) == []


def test_comparison_catches_a_changed_variable() -> None:
    env = {"SM_CURRENT_HOST": "algo-1", "RANK": "0", "TORCHELASTIC_RUN_ID": "x", "HOME": "/root"}
    base = {"hostname": "algo-1", "resolves": {"algo-1": "10.0.0.2"}, "cwd": "/opt/ml/code",
            "opt_ml": ["code"], "config": ["resourceconfig.json"]}
    a = {"env-algo-1-0.json": {**base, "env": env}}
    same = {"env-algo-1-0.json": {**base, "env": {**env, "TORCHELASTIC_RUN_ID": "y", "HOME": "/home/u"}}}
    assert compare(a, same) == []  # documented or not compared
    changed = {"env-algo-1-0.json": {**base, "env": {**env, "SM_CURRENT_HOST": "algo-2"}}}
    assert compare(a, changed) == ["env-algo-1-0.json: SM_CURRENT_HOST 'algo-1' != 'algo-2'"]
    other_subnet = {"env-algo-1-0.json": {**base, "resolves": {"algo-1": "10.0.1.2"}, "env": env}}
    assert compare(a, other_subnet) == []
    moved = {"env-algo-1-0.json": {**base, "resolves": {"algo-1": "10.0.0.3"}, "env": env}}
    assert compare(a, moved) == ["env-algo-1-0.json: resolves {'algo-1': '10.0.0.2'} != {'algo-1': '10.0.0.3'}"]
    missing = {"env-algo-1-0.json": {**base, "env": {k: v for k, v in env.items() if k != "RANK"}}}
    assert compare(a, missing) == ["env-algo-1-0.json: RANK '0' != None"]
