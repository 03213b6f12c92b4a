"""Malformed requests and environments: refused with an error naming the field, before any host
starts, leaving no file and no process.

Most cases go through the Python API (``emulator.run``, fast: nothing is imported beyond the
request layer); a handful go through ``python -m emulator run`` (exit 2, message naming the
field). The autouse fixture in ``conftest.py`` checks for processes, sockets and temp trees.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.errors import RequestError

from ..conftest import our_processes

GPU = "ml.g5.12xlarge"  # 4 GPUs
CPU = "ml.m5.xlarge"
ON = {"enabled": True}


@dataclass(frozen=True)
class Case:
    """One bad request: keyword overrides of a valid request, and the field the error names."""

    id: str
    field: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Prepares the workspace (gets the tmp root, returns extra kwargs).
    setup: Callable[[Path], dict[str, Any]] | None = None
    #: Text the message must contain besides the field.
    says: str = ""


def _outside_entry(root: Path) -> dict[str, Any]:
    (root / "evil.py").write_text("print('outside')\n")
    return {"entry_point": "../evil.py"}


def _output_is_file(root: Path) -> dict[str, Any]:
    target = root / "out-file"
    target.write_text("not a folder\n")
    return {"output_path": target}


def _existing_results(root: Path) -> dict[str, Any]:
    job = root / "out" / "qa-job"
    job.mkdir(parents=True)
    (job / "job.json").write_text("{}\n")
    return {}


def _checkpoint_is_file(root: Path) -> dict[str, Any]:
    target = root / "ckpt-file"
    target.write_text("x")
    return {"checkpoint_dir": target}


def _channel_is_file(root: Path) -> dict[str, Any]:
    target = root / "train.csv"
    target.write_text("1,2\n")
    return {"channels": {"train": target}}


CASES = [
    Case("unknown-distribution-key", "distribution", {"distribution": {"horovod": ON}},
         says="horovod"),
    Case("distribution-not-a-dict", "distribution", {"distribution": "mpi"}),
    Case("two-distributions", "distribution",
         {"instance_type": GPU, "distribution": {"torch_distributed": ON, "mpi": ON}},
         says="two distributions"),
    Case("distribution-section-not-a-dict", "distribution.torch_distributed",
         {"instance_type": GPU, "distribution": {"torch_distributed": True}}),
    Case("pytorchddp-and-smdistributed", "distribution",
         {"instance_type": "ml.p4d.24xlarge",
          "distribution": {"pytorchddp": ON, "smdistributed": {"dataparallel": ON}}},
         says="Cannot use both"),
    Case("modelparallel", "distribution.smdistributed.modelparallel",
         {"instance_type": "ml.p4d.24xlarge",
          "distribution": {"smdistributed": {"modelparallel": ON}}}),
    Case("smdistributed-unknown-strategy", "distribution.smdistributed",
         {"instance_type": "ml.p4d.24xlarge", "distribution": {"smdistributed": {"tensorparallel": ON}}}),
    Case("smdistributed-on-p5", "distribution",
         {"instance_type": "ml.p5.48xlarge", "distribution": {"smdistributed": {"dataparallel": ON}}},
         says="p5"),
    Case("torch-distributed-on-cpu", "distribution.torch_distributed",
         {"instance_type": CPU, "distribution": {"torch_distributed": ON}}, says="GPU and Trainium"),
    Case("pytorchxla-not-emulated", "distribution.pytorchxla",
         {"instance_type": GPU, "distribution": {"pytorchxla": ON}}),
    Case("mpi-zero-processes", "distribution.mpi.processes_per_host",
         {"distribution": {"mpi": {"enabled": True, "processes_per_host": 0}}}),
    Case("mpi-bool-processes", "distribution.mpi.processes_per_host",
         {"distribution": {"mpi": {"enabled": True, "processes_per_host": True}}}),
    Case("zero-hosts", "ResourceConfig.InstanceCount", {"instance_count": 0}),
    Case("negative-hosts", "ResourceConfig.InstanceCount", {"instance_count": -2}),
    Case("hosts-as-string", "ResourceConfig.InstanceCount", {"instance_count": "2"}),
    Case("too-many-hosts", "ResourceConfig.InstanceCount", {"instance_count": 65}),
    Case("gpu-override-above-count", "gpus_per_host", {"instance_type": GPU, "gpus_per_host": 16},
         says="1..4"),
    Case("gpu-override-zero", "gpus_per_host", {"instance_type": GPU, "gpus_per_host": 0}),
    Case("gpu-override-on-cpu-type", "gpus_per_host", {"instance_type": CPU, "gpus_per_host": 1},
         says="no GPUs"),
    Case("unknown-instance-type", "ResourceConfig.InstanceType", {"instance_type": "ml.x9.huge"}),
    Case("local-mode-instance-type", "ResourceConfig.InstanceType", {"instance_type": "local"},
         says="local mode"),
    Case("missing-entry-point", "entry_point", {"entry_point": "nope.py"}, says='No file named "nope.py" was found'),
    Case("empty-entry-point", "entry_point", {"entry_point": ""}),
    Case("entry-point-outside-source-dir", "entry_point", setup=_outside_entry, says="outside"),
    Case("entry-point-absolute-outside", "entry_point", {"entry_point": "/etc/hostname"}),
    Case("missing-source-dir", "source_dir", {"source_dir": "/nonexistent/qa-src"}),
    Case("channel-folder-missing", "InputDataConfig.train",
         {"channels": {"train": "/nonexistent/qa-data"}}),
    Case("channel-is-a-file", "InputDataConfig.train", setup=_channel_is_file),
    Case("channel-bad-name", "InputDataConfig.bad name!", {"channels": {"bad name!": "."}}),
    Case("channel-s3-uri", "InputDataConfig.train", {"channels": {"train": "s3://bucket/x"}}),
    Case("channels-not-a-mapping", "InputDataConfig", {"channels": ["train=."]}),
    Case("hyperparameters-a-list", "HyperParameters", {"hyperparameters": [1, 2]}),
    Case("hyperparameters-a-string", "HyperParameters", {"hyperparameters": "lr=0.1"}),
    Case("hyperparameter-key-not-string", "HyperParameters", {"hyperparameters": {1: 2}}),
    Case("hyperparameter-value-too-long", "HyperParameters.blob", {"hyperparameters": {"blob": "x" * 3000}}),
    Case("too-many-hyperparameters", "HyperParameters",
         {"hyperparameters": {f"k{i}": i for i in range(100)}}),
    Case("job-name-underscore", "TrainingJobName", {"job_name": "my_job"}),
    Case("job-name-leading-hyphen", "TrainingJobName", {"job_name": "-job"}),
    Case("job-name-too-long", "TrainingJobName", {"job_name": "a" * 64}),
    Case("job-name-empty", "TrainingJobName", {"job_name": ""}),
    Case("job-name-already-used", "TrainingJobName", setup=_existing_results, says="already"),
    Case("output-path-is-a-file", "OutputDataConfig.S3OutputPath", setup=_output_is_file),
    Case("output-path-s3", "OutputDataConfig.S3OutputPath", {"output_path": "s3://bucket/out"}),
    Case("negative-max-run", "StoppingCondition.MaxRuntimeInSeconds", {"max_run": -5}),
    Case("zero-max-run", "StoppingCondition.MaxRuntimeInSeconds", {"max_run": 0}),
    Case("unknown-profile", "profile", {"profile": "fast"}, says="exact"),
    Case("max-run-over-28-days", "StoppingCondition.MaxRuntimeInSeconds", {"max_run": 28 * 86400 + 1}),
    Case("max-run-as-string", "StoppingCondition.MaxRuntimeInSeconds", {"max_run": "60"}),
    Case("env-name-starts-with-digit", "Environment.1BAD", {"environment": {"1BAD": "x"}}),
    Case("env-name-with-hyphen", "Environment.MY-VAR", {"environment": {"MY-VAR": "x"}}),
    Case("env-value-not-string", "Environment.LR", {"environment": {"LR": 0.1}}),
    Case("environment-not-a-mapping", "Environment", {"environment": ["A=B"]}),
    Case("checkpoint-local-path-relative", "CheckpointConfig.LocalPath",
         {"checkpoint_local_path": "checkpoints"}),
    Case("checkpoint-dir-is-a-file", "CheckpointConfig.S3Uri", setup=_checkpoint_is_file),
    Case("bad-region", "region", {"region": "mars"}),
    Case("unknown-backend", "backend", {"backend": "kubernetes"}),
]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime)
            for p in root.rglob("*")}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("raise SystemExit('a bad request must never start this')\n")
    return tmp_path


def test_the_matrix_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def test_the_baseline_request_is_valid(workspace: Path) -> None:
    """Positive control: without the bad override the request builds (so each case tests
    exactly its own override)."""
    from emulator.job.request import create

    req = create(entry_point="train.py", source_dir=workspace / "src",
                 output_path=workspace / "out", job_name="qa-job")
    assert req.job_name == "qa-job" and req.host_count == 1


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_request_is_refused_before_anything_starts(case: Case, workspace: Path) -> None:
    kwargs: dict[str, Any] = {"entry_point": "train.py", "source_dir": workspace / "src",
                              "output_path": workspace / "out", "job_name": "qa-job",
                              "echo": False}
    if case.setup is not None:
        kwargs.update(case.setup(workspace))
    kwargs.update(case.kwargs)
    before = _tree(workspace)
    children_before = set(our_processes())
    with pytest.raises(RequestError) as info:
        emulator.run(**kwargs)
    err = info.value
    assert err.field == case.field, str(err)
    assert str(err).startswith(case.field + ":")
    assert case.says in str(err)
    assert _tree(workspace) == before, "a refused request wrote files"
    assert set(our_processes()) == children_before, "a refused request started processes"


# --------------------------------------------------------------------------------------------
# Through the CLI: exit code 2, a message that names the field, nothing written

CLI_CASES = [
    ("hyperparameters-not-an-object", ["--hyperparameters", "[1, 2]"], "HyperParameters"),
    ("hyperparameters-not-json", ["--hyperparameters", "{lr: 0.1}"], "HyperParameters"),
    ("channel-without-equals", ["--channel", "train"], "--channel"),
    ("env-without-name", ["--env", "=value"], "--env"),
    ("unknown-backend", ["--backend", "kubernetes"], "--backend"),
    ("zero-hosts", ["--hosts", "0"], "ResourceConfig.InstanceCount"),
    ("two-distributions", ["--instance-type", GPU, "--distribution",
                           '{"torch_distributed": {"enabled": true}, "mpi": {"enabled": true}}'],
     "distribution"),
    ("job-name-with-dot", ["--job-name", "v1.2"], "TrainingJobName"),
    ("negative-max-run", ["--max-run", "-1"], "StoppingCondition.MaxRuntimeInSeconds"),
    ("hosts-not-a-number", ["--hosts", "two"], "--hosts"),
    ("unknown-profile", ["--profile", "fast"], "profile"),
]


@pytest.mark.parametrize("args,field_name", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_bad_input_with_exit_2(args: list[str], field_name: str, workspace: Path) -> None:
    out = workspace / "out"
    before = _tree(workspace)
    argv = [sys.executable, "-m", "emulator", "run", "--entry-point", "train.py",
            "--source-dir", str(workspace / "src"), "--output-dir", str(out), "--quiet"]
    if "--job-name" not in args:
        argv += ["--job-name", "qa-cli"]
    proc = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert field_name in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _tree(workspace) == before
