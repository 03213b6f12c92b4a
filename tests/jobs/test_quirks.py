"""Toolkit quirks that report success for a failed job: detection, and one reproduced for real."""

from __future__ import annotations

import json
from pathlib import Path

from emulator.diagnostics import quirks

from ..conftest import import_or_skip

TORCH_NATIVE = {"sagemaker_torch_distributed_enabled": "true",
                "sagemaker_toolkit_native_launcher_enabled": "true"}
CHILD_FAILED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
  exitcode  : 1 (pid: 312)
"""


def test_no_warning_for_a_clean_job() -> None:
    logs = {"algo-1": "epoch 1\nepoch 2\ndone\n", "algo-2": "epoch 1\nepoch 2\ndone\n"}
    assert quirks.detect(logs, {"sagemaker_torch_distributed_enabled": "true"}) == []
    assert quirks.detect(logs, {"sagemaker_mpi_enabled": "true"}) == []
    assert quirks.detect(logs, TORCH_NATIVE)[0].startswith("torch_distributed with")


def test_native_launcher_warns_and_names_the_failed_host() -> None:
    logs = {"algo-1": "ok\n", "algo-2": CHILD_FAILED}
    (w,) = quirks.detect(logs, TORCH_NATIVE)
    assert "sagemaker_toolkit_native_launcher_enabled" in w and "algo-2" in w and "algo-1" not in w


def test_native_launcher_flag_without_torch_distributed_is_harmless() -> None:
    assert quirks.detect({"algo-1": CHILD_FAILED}, {"sagemaker_toolkit_native_launcher_enabled": "true"}) == []
    # plain Python values (not JSON strings) are understood too
    assert quirks.detect({"algo-1": ""}, {"sagemaker_torch_distributed_enabled": True,
                                          "sagemaker_toolkit_native_launcher_enabled": False}) == []


def test_success_reported_after_a_nonzero_return_code() -> None:
    log = ("sagemaker-training-toolkit INFO     Done waiting for a return code. Received 1 from exiting "
           "process.\nsagemaker-training-toolkit INFO     Reporting training SUCCESS\n")
    (w,) = quirks.detect({"algo-1": log}, {})
    assert w.startswith("algo-1:") and "exit code 1" in w
    ok = log.replace("Received 1", "Received 0")
    assert quirks.detect({"algo-1": ok}, {}) == []


def test_gloo_enforce_not_met_is_flagged_on_its_host() -> None:
    logs = {"algo-1": "ok\n",
            "algo-2": "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
                      "  what():  [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446]\n"}
    (w,) = quirks.detect(logs, {})
    assert w.startswith("algo-2:") and "Known exception" in w


def test_mpi_worker_failures_are_flagged() -> None:
    logs = {"algo-1": "[1,mpirank:0,algo-1]<stdout>:step 1\n",
            "algo-2": "Traceback (most recent call last):\nValueError: boom\n"}
    (w,) = quirks.detect(logs, {"sagemaker_mpi_enabled": "true"})
    assert "worker hosts always exit 0" in w and "algo-2" in w
    ranks = {"algo-1": "[1,mpirank:3,algo-2]<stderr>:RuntimeError: oops\n", "algo-2": ""}
    (w,) = quirks.detect(ranks, {"sagemaker_distributed_dataparallel_enabled": "true"})
    assert "MPI rank(s) 3" in w and "SMDataParallel" in w
    # the same logs without an MPI launcher: nothing to say
    assert quirks.detect(logs, {}) == []


def test_native_launcher_quirk_is_reproduced_by_the_real_toolkit(tmp_path: Path) -> None:
    """torch_distributed + sagemaker_toolkit_native_launcher_enabled: a failing script, and yet
    the real toolkit exits 0 so the job Completes, as on SageMaker. detect() warns."""
    import_or_skip("torch")
    import emulator

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("import time\ntime.sleep(1)\nraise SystemExit('rank failed')\n")
    result = emulator.run(entry_point="train.py", source_dir=src, output_path=tmp_path / "out",
                          job_name="qa-native", instance_type="ml.g5.xlarge", instance_count=1,
                          distribution={"torch_distributed": {"enabled": True}},
                          hyperparameters={"sagemaker_toolkit_native_launcher_enabled": True},
                          echo=False, stop_grace=2)
    hps = json.loads(json.dumps(result.description["HyperParameters"]))
    assert result.status == "Completed", result.failure_reason  # the quirk: success reported
    warnings = quirks.detect({h.name: result.log(h.name) for h in result.hosts}, hps)
    assert any("native_launcher" in w for w in warnings), warnings
    assert any(w.startswith("algo-1: the toolkit received exit code 1") for w in warnings), warnings
    # the supervisor reports the same warnings in the result and in job.json
    assert list(result.warnings) == warnings
    assert result.description["Emulator"]["Warnings"] == warnings
