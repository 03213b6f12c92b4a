"""End-to-end jobs on the process backend: real namespaces, the real toolkit, torchrun, gloo."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

import emulator
from emulator.backends import get_backend
from emulator.job import request as rq
from emulator.job.result import JobResult
from emulator.supervisor import launch_plan
from emulator.supervisor import run as run_job

SCRIPTS = Path(__file__).parents[1] / "scripts"
#: Spaces and shell metacharacters that must reach the script intact. Were any shell to run it, a
#: host would create a marker file in /opt/ml/model, which ends up in model.tar.gz.
INJECTED = "/opt/ml/model/injected"
MSG = (f"hello world; touch {INJECTED}-semicolon && echo $(touch {INJECTED}-subst) `touch {INJECTED}-backtick` "
       f"| tee {INJECTED}-pipe > {INJECTED}-redirect 'single' \"double\"")
TORCHRUN_2X2 = dict(entry_point="rank_report.py", source_dir=SCRIPTS, instance_count=2,
                    instance_type="ml.p4d.24xlarge", gpus_per_host=2,
                    distribution={"torch_distributed": {"enabled": True}},
                    hyperparameters={"msg": MSG}, echo=False, stop_grace=2, profile="ci")


def ranks(result: JobResult) -> dict[int, dict]:
    return {int(json.loads(v)["rank"]): json.loads(v) for k, v in result.model_files().items()
            if k.startswith("rank-")}


@pytest.fixture(scope="module")
def torchrun_job(tmp_path_factory: pytest.TempPathFactory) -> JobResult:
    out = tmp_path_factory.mktemp("torchrun")
    return emulator.run(output_path=out, job_name="torchrun-2x2", **TORCHRUN_2X2)


def test_torch_distributed_2x2_completes(torchrun_job: JobResult) -> None:
    assert torchrun_job.status == "Completed", torchrun_job.failure_reason
    assert torchrun_job.description["TrainingJobStatus"] == "Completed"
    statuses = [t["Status"] for t in torchrun_job.description["SecondaryStatusTransitions"]]
    assert statuses == ["Starting", "Downloading", "Training", "Uploading", "Completed"]
    assert [h.exit_code for h in torchrun_job.hosts] == [0, 0]


def test_every_rank_sees_its_place(torchrun_job: JobResult) -> None:
    assert torchrun_job.status == "Completed", torchrun_job.failure_reason  # else no model files to look in
    assert not [name for name in torchrun_job.model_files() if "injected" in name]  # no shell ran MSG
    seen = ranks(torchrun_job)
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, r in seen.items():
        assert r["world_size"] == "4" and r["pg_world_size"] == 4
        assert r["host"] == f"algo-{rank // 2 + 1}"
        assert r["local_rank"] == str(rank % 2)
        assert r["master_addr"] == "algo-1" and r["master_port"] == "7777"
        assert r["master_ip"] == "10.0.0.2" and not r["master_ip"].startswith("127.")
        assert r["own_ip"] == f"10.0.0.{rank // 2 + 2}"
        assert r["sum"] == 10.0  # 1 + 2 + 3 + 4: all_reduce across hosts
        assert r["sm_num_gpus"] == "2"  # the real toolkit counted the emulated GPUs
        assert r["msg"] == MSG  # spaces and shell metacharacters arrive intact
        assert r["cuda_available"] is True
        assert {"code", "input", "model", "output"} <= set(r["opt_ml"])
        assert r["aws_keys"] == []


def test_plan_launcher_equals_the_toolkits_logged_command(torchrun_job: JobResult, tmp_path: Path) -> None:
    req = rq.create(output_path=tmp_path, job_name="torchrun-2x2",
                    **{k: v for k, v in TORCHRUN_2X2.items() if k not in ("echo", "stop_grace")})
    planned, _ = launch_plan(req, get_backend("process"), caller_env={}, job_id="x", scratch=tmp_path)
    assert torchrun_job.status == "Completed", torchrun_job.failure_reason
    assert [host.name for host in planned.hosts] == ["algo-1", "algo-2"]
    for host in planned.hosts:
        log = torchrun_job.log(host.name)
        logged = re.search(r"Invoking script with the following command:\s*\n\s*\n(.+)\n", log)
        assert logged, log[-2000:]
        assert logged.group(1).strip() == " ".join(host.launcher or [])


def test_nccl_process_group_runs_on_gloo(torchrun_job: JobResult) -> None:
    assert "process group backend 'nccl' runs on gloo" in torchrun_job.log("algo-1")


def test_host_failure_fails_the_job_fast(tmp_path: Path) -> None:
    result = emulator.run(entry_point="fail_on_algo2.py", source_dir=SCRIPTS, instance_count=2,
                          output_path=tmp_path, job_name="zerodiv", echo=False, stop_grace=2)
    assert result.status == "Failed"
    assert result.first_failure == "algo-2"
    assert result.failure_reason is not None
    assert result.failure_reason.startswith("AlgorithmError: ExecuteUserScriptError:")
    assert "ZeroDivisionError" in result.failure_reason
    assert len(result.failure_reason) <= 1024
    desc = json.loads((result.job_dir / "job.json").read_text())
    assert desc["TrainingJobStatus"] == "Failed" and desc["FailureReason"] == result.failure_reason
    hosts = {h["Host"]: h for h in desc["Emulator"]["Hosts"]}
    assert hosts["algo-2"]["ExitCode"] == 1  # the toolkit exits 1 for any user-script failure
    assert hosts["algo-1"]["ExitCode"] != 0  # stopped by the emulator, not finished
    first = desc["Emulator"]["FirstFailure"]
    assert first["Host"] == "algo-2"
    # stopped promptly: the job ended within seconds of the failure (emulator's own timestamps)
    from datetime import datetime

    ended = datetime.fromisoformat(desc["TrainingEndTime"])
    failed = datetime.fromisoformat(first["Time"])
    assert (ended - failed).total_seconds() < 10


def test_two_jobs_at_once_do_not_interfere(tmp_path: Path) -> None:
    results: dict[str, JobResult] = {}

    def go(name: str) -> None:
        results[name] = emulator.run(output_path=tmp_path, job_name=name, **{
            **TORCHRUN_2X2, "gpus_per_host": 1})

    threads = [threading.Thread(target=go, args=(n,)) for n in ("job-a", "job-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["job-a", "job-b"]  # neither thread died before its result
    for name, result in results.items():
        assert result.status == "Completed", (name, result.failure_reason)
        seen = ranks(result)
        assert sorted(seen) == [0, 1] and all(r["sum"] == 3.0 for r in seen.values())


def test_broken_requirements_fail_as_sagemaker_does(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('never runs')\n")
    (src / "requirements.txt").write_text("this is not a requirement ===\n")
    result = emulator.run(entry_point="train.py", source_dir=src, output_path=tmp_path / "out",
                          job_name="badreq", echo=False, stop_grace=2)
    assert result.status == "Failed"
    # sagemaker-training 5.1.4 raises InstallRequirementsError for a script's requirements.txt
    assert result.failure_reason and "InstallRequirementsError:" in result.failure_reason
    assert "Invalid requirement" in result.failure_reason


def test_cli_exit_status_and_job_json(tmp_path: Path) -> None:
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(
        "import os, socket\nopen('/opt/ml/model/m.txt','w').write(socket.gethostname())\n"
        "os.makedirs('/opt/ml/output/data', exist_ok=True)\nopen('/opt/ml/output/data/o.txt','w').write('x')\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "emulator", "run", "--entry-point", "train.py",
                           "--source-dir", str(src), "--output-dir", str(out), "--job-name", "cli-job",
                           "--quiet"], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
    assert done.returncode == 0, done.stdout + done.stderr
    job = out / "cli-job"
    desc = json.loads((job / "job.json").read_text())
    assert desc["TrainingJobStatus"] == "Completed"
    assert desc["ModelArtifacts"]["S3ModelArtifacts"] == (job / "output" / "model.tar.gz").as_uri()
    assert (job / "output" / "output.tar.gz").exists()
    assert (job / "logs" / "algo-1.log").read_text().count("Reporting training SUCCESS") == 1
    bad = subprocess.run([sys.executable, "-m", "emulator", "run", "--entry-point", "missing.py",
                          "--source-dir", str(src), "--output-dir", str(out)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "entry_point" in bad.stderr


def test_stop_request_stops_the_job_as_stoptrainingjob_does(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    stop = threading.Event()
    req = rq.create(entry_point="train.py", source_dir=src, output_path=tmp_path / "out", job_name="stopme")
    box: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", run_job(req, echo=False, stop_grace=1, stop=stop)))
    thread.start()
    log = req.job_dir / "logs" / "algo-1.log"
    for _ in range(600):
        if log.exists() and "started" in log.read_text():
            break
        threading.Event().wait(0.1)
    stop.set()
    thread.join(60)
    result = box["r"]
    assert (result.status, result.secondary_status) == ("Stopped", "Stopped")
    assert [t["Status"] for t in result.description["SecondaryStatusTransitions"]][-3:] == [
        "Stopping", "Uploading", "Stopped"]
    assert result.failure_reason is None
