"""``python -m emulator replay`` of a real job's ``job.json``: the failure reproduces, ``replay
--plan`` is the original command's ``plan`` up to names and paths, and the emitted pytest module
xfails in a fresh pytest run while the failure reproduces and fails (XPASS(strict)) once it does not.

One recorded job (2 hosts, ``torch_distributed``, rank 1 fails with a clear error) made by
``python -m emulator run``, shared by the module; the replays run in the ``ci`` profile, the one
the job's ``job.json`` records.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: The failing rank's message. The toolkit's ErrorMessage holds the rank's stderr as it arrived, in
#: pieces (``ValueError\n replay-me: …`` in one run of four), so only the message is matched.
ERROR = "replay-me: rank 1 failed on purpose"
TRAIN = f"""import os
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], flush=True)
if os.environ["RANK"] == "1":
    raise ValueError("{ERROR}")
"""
NAME = "replay-recorded"
JOB_FLAGS = ["--entry-point", "train.py", "--hosts", "2", "--instance-type", "ml.p4d.24xlarge",
             "--gpus-per-host", "1", "--distribution", '{"torch_distributed": {"enabled": true}}',
             "--hyperparameters", '{"epochs": 2, "name": "x y", "cfg": {"a": [1, 2.5]}}',
             "--profile", "ci", "--backend", "process"]


def emulator(*argv: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("replay-jobs")
    (root / "src").mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "data").mkdir()
    (root / "data" / "a.csv").write_text("1\n")
    done = emulator("run", *JOB_FLAGS, "--source-dir", str(root / "src"), "--channel", f"training={root / 'data'}",
                    "--output-dir", str(root / "out"), "--job-name", NAME, "--quiet")
    assert done.returncode == 1, done.stdout + done.stderr
    job = root / "out" / NAME / "job.json"
    document = json.loads(job.read_text())
    assert document["TrainingJobStatus"] == "Failed" and ERROR in document["FailureReason"]
    return {"root": root, "job": job, "document": document}


@pytest.fixture(scope="module")
def replayed(recorded: dict[str, Any]) -> dict[str, Any]:
    root = recorded["root"]
    # no --profile: the recorded job ran with --profile ci, which its job.json records (Emulator.Profile)
    done = emulator("replay", str(recorded["job"]), "--source-dir", str(root / "src"),
                    "--output-dir", str(root / "replay-out"), "--backend", "process")
    jobs = list((root / "replay-out").glob(f"{NAME}-replay-*/job.json"))
    return {"done": done, "document": json.loads(jobs[0].read_text()) if len(jobs) == 1 else None}


def test_the_replay_fails_as_recorded(recorded: dict[str, Any], replayed: dict[str, Any]) -> None:
    done, document = replayed["done"], replayed["document"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert document is not None and document["TrainingJobStatus"] == "Failed"
    assert ERROR in document["FailureReason"]
    first = recorded["document"]["FailureReason"].splitlines()[0]
    assert document["FailureReason"].splitlines()[0] == first
    report = done.stdout
    assert f"replay of {NAME} " in report and "training: " in report  # the report before start
    assert report.index("replay of") < report.index("FailureReason:")  # … and the outcome after the summary
    assert "reproduced: Failed as recorded, and the FailureReason's first line matches" in report
    assert "exit 0: replay exits 0 iff" in report
    assert recorded["document"]["Emulator"]["Profile"] == "ci"  # what JOB_FLAGS asked for
    assert document["Emulator"]["Profile"] == "ci" and "profile: ci (Emulator.Profile in job.json)" in report


def _plan(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _normal(plan: dict[str, Any], names: list[str], root: Path) -> Any:
    text = json.dumps(plan)
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(name, "<job>").replace(name.lower(), "<job>")
    return json.loads(text.replace(str(root), "<root>"))


def _mounts(host: dict[str, Any]) -> dict[str, str]:
    """Target → source, but for the backend's scratch (its folder name holds a cut job name)."""
    return {m["target"]: m["source"] for m in host["mounts"] if "/sm-emulator-" not in m["source"]}


def test_replay_plan_is_the_original_commands_plan(recorded: dict[str, Any]) -> None:
    """Round trip: the plan of the command that made the job, and the replay's plan of its job.json,
    agree on every host's files, launcher, SM_* and environment, up to job names and paths."""
    root = recorded["root"]
    original = _plan(emulator("plan", *JOB_FLAGS, "--source-dir", str(root / "src"), "--channel",
                              f"training={root / 'data'}", "--output-dir", str(root / "plan-out"), "--job-name", NAME))
    replay = _plan(emulator("replay", str(recorded["job"]), "--plan", "--source-dir", str(root / "src"),
                            "--output-dir", str(root / "plan-out"), "--profile", "ci", "--backend", "process"))
    new = replay["request"]["TrainingJobName"]
    a, b = _normal(original, [NAME], root), _normal(replay, [new, NAME], root)
    assert b["request"]["HyperParameters"] == a["request"]["HyperParameters"]
    assert [h["name"] for h in b["hosts"]] == [h["name"] for h in a["hosts"]] == ["algo-1", "algo-2"]
    for mine, theirs in zip(b["hosts"], a["hosts"]):
        assert mine["launcher_command"] == theirs["launcher_command"] and mine["launcher_command"]
        assert mine["toolkit_sm_env"] == theirs["toolkit_sm_env"]
        assert mine["files"] == theirs["files"] and mine["emulated_gpus"] == theirs["emulated_gpus"] == 1
    for mine, theirs in zip(b["launch"]["hosts"], a["launch"]["hosts"]):
        assert mine["environment"] == theirs["environment"]
        assert mine["command"] == theirs["command"]
        assert _mounts(mine) == _mounts(theirs) and "/opt/ml/input/data/training" in _mounts(mine)
    assert not (root / "plan-out").exists()


def test_the_emitted_pytest_module_xfails_until_the_fix(recorded: dict[str, Any], tmp_path: Path) -> None:
    """``--emit-pytest`` (``--expect fix``, the default) of the recorded failure, in one fresh pytest
    run: with the recorded code the replay fails as recorded, so the test xfails (the suite stays
    green); with code whose script now succeeds the replay Completes and strict=True fails the test
    as XPASS(strict). Two replays, the fewest that show both."""
    root = recorded["root"]
    (tmp_path / "fixed").mkdir()
    (tmp_path / "fixed" / "train.py").write_text(TRAIN.replace(f'raise ValueError("{ERROR}")', 'print("fixed")'))
    for name, source in (("test_still_broken.py", root / "src"), ("test_fixed.py", tmp_path / "fixed")):
        done = emulator("replay", str(recorded["job"]), "--emit-pytest", str(tmp_path / name), "--source-dir",
                        str(source))
        assert done.returncode == 0, done.stderr
    run = subprocess.run([sys.executable, "-m", "pytest", "test_still_broken.py", "test_fixed.py", "-q", "-rfx",
                          "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}", "--emulator-backend",
                          "process"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    out = run.stdout
    assert run.returncode == 1, out[-4000:] + run.stderr[-2000:]
    assert "1 failed, 1 xfailed" in out, out[-4000:]
    assert "XFAIL test_still_broken.py::" in out and "AlgorithmError: ExecuteUserScriptError:" in out
    assert "FAILED test_fixed.py::" in out and "[XPASS(strict)]" in out, out[-4000:]
