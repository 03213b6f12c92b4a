"""Bad values of the fidelity options (``pass_env``, ``host_order``, ``smddp_strict``, sharded
channels, checkpoint paths): refused before any host starts, naming the field and what is allowed,
leaving no file and no process. Same harness as ``test_bad_input.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.errors import RequestError

from .test_bad_input import CPU, GPU, Case, _tree, workspace  # noqa: F401  (workspace: a fixture)
from .test_bad_input import test_bad_request_is_refused_before_anything_starts as refused


def _data(root: Path) -> Path:
    folder = root / "data"
    folder.mkdir(exist_ok=True)
    (folder / "part-0.csv").write_text("1,2\n")  # a channel with no files is refused (test_s3_channels.py)
    return folder


def _ckpt(path: str) -> Any:
    def setup(root: Path) -> dict[str, Any]:
        return {"checkpoint_dir": root / "ck", "checkpoint_local_path": path}

    return setup


CASES = [
    Case("pass-env-a-string", "pass_env", {"pass_env": "HF_TOKEN"}, says="list of variable names"),
    Case("pass-env-bad-name", "pass_env", {"pass_env": ["1TOKEN"]}, says="not a variable name"),
    Case("pass-env-credential", "pass_env", {"pass_env": ["AWS_SECRET_ACCESS_KEY"]},
         says="forward_aws_credentials"),
    Case("pass-env-emulator-variable", "pass_env", {"pass_env": ["EMULATOR_GPU_COUNT"]}),
    Case("host-order-a-string", "host_order", {"instance_count": 2, "host_order": "algo-2,algo-1"},
         says='["algo-2", "algo-1"]'),
    Case("host-order-missing-host", "host_order", {"instance_count": 2, "host_order": ["algo-2"]},
         says="algo-1 is missing"),
    Case("host-order-unknown-host", "host_order", {"instance_count": 2, "host_order": ["algo-1", "algo-3"]},
         says="'algo-3' is not a host of this job"),
    Case("host-order-repeated-host", "host_order", {"instance_count": 2, "host_order": ["algo-1", "algo-1"]}),
    Case("smddp-strict-on-cpu", "smddp_strict", {"instance_type": CPU, "smddp_strict": True},
         says="has no SMDDP"),
    Case("smddp-strict-not-a-bool", "smddp_strict", {"instance_type": GPU, "smddp_strict": "yes"},
         says="true or false"),
    Case("channel-unknown-distribution", "InputDataConfig.train.S3DataDistributionType",
         setup=lambda root: {"channels": {"train": {"path": _data(root), "distribution": "Sharded"}}},
         says="FullyReplicated or ShardedByS3Key"),
    Case("channel-mapping-without-path", "InputDataConfig.train",
         setup=lambda root: {"channels": {"train": {"folder": _data(root)}}}),
    Case("checkpoint-local-path-without-dir", "CheckpointConfig.LocalPath",
         {"checkpoint_local_path": "/opt/ml/checkpoints"}, says="checkpoint_dir"),
    Case("checkpoint-local-path-dotdot", "CheckpointConfig.LocalPath", setup=_ckpt("/opt/ml/../../etc")),
    Case("checkpoint-local-path-system-folder", "CheckpointConfig.LocalPath", setup=_ckpt("/usr"),
         says="system folder"),
    Case("checkpoint-local-path-not-creatable", "CheckpointConfig.LocalPath",
         setup=_ckpt("/sm-emulator-no-such-checkpoints"), says="--backend docker"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_option_is_refused_before_anything_starts(case: Case, workspace: Path) -> None:  # noqa: F811
    refused(case, workspace)  # test_bad_input.py's harness: the field, the text, no file, no process
    kwargs: dict[str, Any] = {"entry_point": "train.py", "source_dir": workspace / "src",
                              "output_path": workspace / "out", "job_name": "qa-job", "echo": False,
                              **(case.setup(workspace) if case.setup else {}), **case.kwargs}
    with pytest.raises(RequestError) as info:
        emulator.run(**kwargs)
    assert "(allowed: " in str(info.value)  # and what is allowed


CLI_CASES = [
    ("pass-env-credential", ["--pass-env", "AWS_SESSION_TOKEN"], "pass_env"),
    ("host-order-unknown-host", ["--hosts", "2", "--host-order", "algo-2,algo-5"], "host_order"),
    ("host-order-too-short", ["--hosts", "3", "--host-order", "algo-3,algo-1"], "host_order"),
    ("smddp-strict-on-cpu", ["--instance-type", CPU, "--smddp-strict"], "smddp_strict"),
    ("sharded-channel-without-equals", ["--sharded-channel", "train"], "--sharded-channel"),
    ("checkpoint-local-path-without-dir", ["--checkpoint-local-path", "/opt/ml/ck"], "CheckpointConfig.LocalPath"),
]


@pytest.mark.parametrize("args,field_name", [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_cli_refuses_bad_option_with_exit_2(args: list[str], field_name: str, command: str,
                                           workspace: Path) -> None:  # noqa: F811
    before = _tree(workspace)
    argv = [sys.executable, "-m", "emulator", command, "--entry-point", "train.py", "--source-dir",
            str(workspace / "src"), "--output-dir", str(workspace / "out"), "--job-name", "qa-cli", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"error: {field_name}"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert _tree(workspace) == before
