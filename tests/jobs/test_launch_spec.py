"""``python -m emulator plan`` prints exactly what ``run`` starts.

The same 2-host x 2-GPU torch_distributed job is planned, then run; inside every host the
container process (PID 1) reports its environment, command line, ``eth0`` address and
``/etc/hosts``, and each must equal the launch spec ``plan`` printed. Runs on the process backend
(as root here, and as an ordinary user in CI's unprivileged step) and on the docker backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).parents[1] / "scripts"


def _flags(tmp_path: Path, backend: str, name: str) -> list[str]:
    return ["--entry-point", "container_env.py", "--source-dir", str(SCRIPTS), "--hosts", "2",
            "--instance-type", "ml.g5.12xlarge", "--gpus-per-host", "2", "--backend", backend,
            "--distribution", '{"torch_distributed": {"enabled": true}}', "--job-name", name,
            "--output-dir", str(tmp_path / "out"), "--env", "MY_SETTING=a b", "--pass-env", "SMEMU_PASSED"]


def _emulator(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SMEMU_PASSED": "passed", "SMEMU_SECRET": "must-not-pass"}
    return subprocess.run([sys.executable, "-m", "emulator", *args], capture_output=True, text=True, env=env,
                          timeout=600, check=False)


def _reported(out: Path) -> dict[str, Any]:
    with tarfile.open(out / "output" / "output.tar.gz") as tar:
        return {m.name.removesuffix(".json"): json.load(tar.extractfile(m))  # type: ignore[arg-type]
                for m in tar.getmembers() if m.isfile()}


@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_plan_is_what_runs(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    name = f"spec-{backend}"
    planned = _emulator("plan", *_flags(tmp_path, backend, name))
    assert planned.returncode == 0, planned.stderr
    spec = json.loads(planned.stdout)["launch"]
    ran = _emulator("run", "--quiet", "--stop-grace", "2", *_flags(tmp_path, backend, name))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    reported = _reported(tmp_path / "out" / name)
    assert sorted(reported) == ["algo-1", "algo-2"]
    copied = json.loads((tmp_path / "out" / name / "launch-spec.json").read_text())["options"].get("files") == "copy"
    assert spec["options"].get("files") == ("copy" if copied else "bind" if backend == "docker" else None)
    assert [host["name"] for host in spec["hosts"]] == ["algo-1", "algo-2"]
    for host in spec["hosts"]:
        seen = reported[host["name"]]
        assert seen["env"] == host["environment"], {
            k: (seen["env"].get(k), host["environment"].get(k))
            for k in set(seen["env"]) ^ set(host["environment"]) | {
                k for k in seen["env"] if seen["env"].get(k) != host["environment"].get(k)}}
        assert seen["address"] == host["address"]
        if copied:  # the engine writes /etc/hosts (EMULATOR_DOCKER_FILES=copy): every algo-N added to it
            assert {ln for ln in host["hosts_file"].splitlines() if "algo-" in ln} <= set(seen["hosts"].splitlines())
        else:
            assert seen["hosts"] == host["hosts_file"]
        if backend == "process":
            assert seen["cmdline"] == host["command"]
        else:  # the image's entrypoint execs the command: `train`, a Python console script
            assert Path(seen["cmdline"][-1]).name == host["command"][-1] == host["argv"][-1]
        # nothing of the caller's environment but what was named
        assert seen["env"]["SMEMU_PASSED"] == "passed" and "SMEMU_SECRET" not in seen["env"]
        assert seen["env"]["MY_SETTING"] == "a b"
    launched = json.loads((tmp_path / "out" / name / "launch-spec.json").read_text())
    assert [host["name"] for host in launched["hosts"]] == ["algo-1", "algo-2"]
    for planned_host, run_host in zip(spec["hosts"], launched["hosts"]):
        assert planned_host["environment"] == run_host["environment"]
        assert planned_host["address"] == run_host["address"]
