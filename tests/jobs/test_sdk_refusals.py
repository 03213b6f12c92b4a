"""Every refusal of the installed SDK's ``PyTorch`` estimator, on the paths that bypass the SDK.

The oracle is the pinned SDK itself: each case builds ``sagemaker.pytorch.PyTorch`` with the same
arguments (no session, nothing calls AWS) and calls ``hyperparameters()`` (what ``fit()`` computes
the distribution hyperparameters with); the ``ValueError`` it raises is the text the emulator must
give, before any host starts, through ``emulator.run``, the CLI and the pytest fixture's
``request.create``. The version lists come from ``sagemaker.fw_utils``, not from this project.
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
from emulator.job import frameworks

from ..conftest import import_or_skip, our_processes
from ..unit.test_bad_input import _tree

fw_utils = import_or_skip("sagemaker.fw_utils")
from sagemaker.estimator import Framework  # noqa: E402
from sagemaker.pytorch import PyTorch  # noqa: E402

ON = {"enabled": True}
GPU, CPU, TRN = "ml.g5.12xlarge", "ml.m5.xlarge", "ml.trn1.32xlarge"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
#: Every framework_version the emulator's family table accepts (each family's DLC versions).
EMULATED_VERSIONS = sorted({v for f in frameworks.FAMILIES for v in f.dlc_versions})


def _py(version: str) -> str:
    return frameworks.family(version).dlc_py[-1]


def sdk_refusal(**kwargs: Any) -> str | None:
    """The pinned SDK's ValueError text for these estimator arguments, or None if it accepts them."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
    try:
        PyTorch(role=ROLE, **kwargs).hyperparameters()
    except ValueError as exc:
        return str(exc)
    return None


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train.py", "train.sh"):
        (src / name).write_text("raise SystemExit('a refused request must never start this')\n")
    return tmp_path


def _emulator_refusal(workspace: Path, **kwargs: Any) -> RequestError | None:
    before, children = _tree(workspace), set(our_processes())
    try:
        emulator.run(output_path=workspace / "out", job_name="qa-sdk", echo=False, **kwargs)
    except RequestError as exc:
        assert _tree(workspace) == before, "a refused request wrote files"
        assert set(our_processes()) == children, "a refused request started processes"
        return exc
    raise AssertionError("unreachable: a valid request would run the job")


def _sdk_kwargs(workspace: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"source_dir": str(workspace / "src"), "instance_count": 2, **kwargs}


CASES: list[tuple[str, dict[str, Any]]] = [
    # smdataparallel (and pytorchddp, rewritten to it) on versions fw_utils does not list
    *[(f"smdataparallel-{v}", {"entry_point": "train.py", "instance_type": "ml.p4d.24xlarge",
                               "framework_version": v, "py_version": _py(v),
                               "distribution": {"smdistributed": {"dataparallel": ON}}})
      for v in EMULATED_VERSIONS if v not in fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"]],
    *[(f"pytorchddp-{v}", {"entry_point": "train.py", "instance_type": "ml.p4d.24xlarge",
                           "framework_version": v, "py_version": _py(v), "distribution": {"pytorchddp": ON}})
      for v in EMULATED_VERSIONS if v not in fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"]],
    # torch_distributed on GPU versions fw_utils does not list
    *[(f"torch-distributed-gpu-{v}", {"entry_point": "train.py", "instance_type": GPU, "framework_version": v,
                                      "py_version": _py(v), "distribution": {"torch_distributed": ON}})
      for v in EMULATED_VERSIONS if v not in fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS],
    ("torch-distributed-family-name", {"entry_point": "train.py", "instance_type": GPU, "framework_version": "2.2",
                                       "py_version": "py310", "distribution": {"torch_distributed": ON}}),
    ("torch-distributed-on-cpu", {"entry_point": "train.py", "instance_type": CPU, "framework_version": "2.3.0",
                                  "py_version": "py311", "distribution": {"torch_distributed": ON}}),
    ("torch-distributed-shell-entry-point", {"entry_point": "train.sh", "instance_type": GPU,
                                             "framework_version": "2.3.0", "py_version": "py311",
                                             "distribution": {"torch_distributed": ON}}),
    ("torch-distributed-cpu-and-shell", {"entry_point": "train.sh", "instance_type": CPU,
                                         "framework_version": "2.3.0", "py_version": "py311",
                                         "distribution": {"torch_distributed": ON}}),
    ("torch-distributed-shell-with-image", {"entry_point": "train.sh", "instance_type": GPU,
                                            "image_uri": "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
                                            "pytorch-training:2.3.0-gpu-py311",
                                            "distribution": {"torch_distributed": ON}}),
    # the one DLC image the SDK refuses for smdistributed
    *[(f"smdistributed-image-{image}", {"entry_point": "train.py", "instance_type": "ml.p4d.24xlarge",
                                        "image_uri": f"763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:"
                                                     f"{image}-ubuntu20.04-sagemaker",
                                        "distribution": {"smdistributed": {"dataparallel": ON}}})
      for image in Framework.UNSUPPORTED_DLC_IMAGE_FOR_SM_PARALLELISM],
    ("smdistributed-on-p5", {"entry_point": "train.py", "instance_type": "ml.p5.48xlarge",
                             "framework_version": "2.2.0", "py_version": "py310",
                             "distribution": {"smdistributed": {"dataparallel": ON}}}),
    # Trainium: the SDK's strategy check comes before the emulator's own refusal of the type
    ("trainium-mpi", {"entry_point": "train.py", "instance_type": TRN, "framework_version": "2.0.0",
                      "py_version": "py310", "distribution": {"mpi": ON}}),
    ("trainium-torch-distributed-version", {"entry_point": "train.py", "instance_type": TRN,
                                            "framework_version": "2.3.0", "py_version": "py311",
                                            "distribution": {"torch_distributed": ON}}),
    ("entry-point-on-s3", {"entry_point": "s3://bucket/train.py", "instance_type": CPU,
                           "framework_version": "2.3.0", "py_version": "py311"}),
]


def test_the_cases_cover_each_sdk_table() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert any(i.startswith("smdataparallel-2.") for i in ids)
    assert any(i.startswith("torch-distributed-gpu-") for i in ids)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_emulator_refuses_what_the_sdk_refuses_with_its_text(case: tuple[str, dict[str, Any]],
                                                                 workspace: Path) -> None:
    _, kwargs = case
    expected = sdk_refusal(**_sdk_kwargs(workspace, kwargs))
    assert expected is not None, "the oracle accepts this case: it tests nothing"
    err = _emulator_refusal(workspace, source_dir=workspace / "src", instance_count=2, **kwargs)
    assert err is not None
    assert expected.strip() in str(err), (expected, str(err))


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    *[(f"torch-distributed-gpu-{v}", {"instance_type": GPU, "framework_version": v, "py_version": _py(v),
                                      "distribution": {"torch_distributed": ON}})
      for v in EMULATED_VERSIONS if v in fw_utils.TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS],
    *[(f"smdataparallel-{v}", {"instance_type": "ml.p4d.24xlarge", "framework_version": v, "py_version": _py(v),
                               "distribution": {"smdistributed": {"dataparallel": ON}}})
      for v in EMULATED_VERSIONS if v in fw_utils.SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS["pytorch"]],
    ("torch-distributed-cpu-with-image", {"instance_type": CPU, "distribution": {"torch_distributed": ON},
                                          "image_uri": "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
                                          "pytorch-training:2.3.0-cpu-py311"}),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_what_the_sdk_accepts_builds_a_request(case: tuple[str, dict[str, Any]], workspace: Path) -> None:
    """Positive control: the checks do not refuse more than the SDK."""
    from emulator.job.request import create

    _, kwargs = case
    assert sdk_refusal(**_sdk_kwargs(workspace, {"entry_point": "train.py", **kwargs})) is None
    create(entry_point="train.py", source_dir=workspace / "src", instance_count=2, output_path=workspace / "out",
           job_name="qa-ok", **kwargs)


@pytest.mark.parametrize("instance_type", [TRN, "ml.trn1.2xlarge", "ml.trn2.48xlarge", "ml.inf2.xlarge"])
def test_neuron_types_are_refused_before_start(instance_type: str, workspace: Path) -> None:
    """``docs/reference/differences.md``: Trainium is refused with a clear error (here with torch_distributed, which the
    SDK accepts on Trainium for 2.0.0)."""
    kwargs = {"instance_type": instance_type, "framework_version": "2.0.0", "py_version": "py310",
              "distribution": {"torch_distributed": ON}}
    if instance_type == TRN:
        assert sdk_refusal(**_sdk_kwargs(workspace, {"entry_point": "train.py", **kwargs})) is None
    err = _emulator_refusal(workspace, entry_point="train.py", source_dir=workspace / "src", **kwargs)
    assert err is not None and err.field == "ResourceConfig.InstanceType"
    assert "Neuron" in str(err) and "does not emulate" in str(err) and "(allowed: " in str(err)


def test_missing_entry_point_has_the_sdks_text(workspace: Path) -> None:
    src = str(workspace / "src")
    with pytest.raises(ValueError) as sdk:
        fw_utils.validate_source_dir("nope.py", src)
    err = _emulator_refusal(workspace, entry_point="nope.py", source_dir=src)
    assert err is not None and str(sdk.value) in str(err)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("torch-distributed-shell-entry-point",
                                                                "trainium-mpi", "torch-distributed-on-cpu")],
                         ids=lambda c: c[0])
def test_the_cli_refuses_with_the_sdks_text_and_exit_2(case: tuple[str, dict[str, Any]], workspace: Path) -> None:
    import json

    _, kwargs = case
    expected = sdk_refusal(**_sdk_kwargs(workspace, kwargs))
    assert expected is not None
    assert expected.strip(), case
    before = _tree(workspace)
    argv = [sys.executable, "-m", "emulator", "run", "--entry-point", kwargs["entry_point"], "--source-dir",
            str(workspace / "src"), "--output-dir", str(workspace / "out"), "--job-name", "qa-cli", "--hosts", "2",
            "--instance-type", kwargs["instance_type"], "--framework-version", kwargs["framework_version"],
            "--py-version", kwargs["py_version"], "--distribution", json.dumps(kwargs["distribution"]), "--quiet"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    for line in expected.strip().splitlines():
        assert line.strip() in proc.stderr, (line, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert _tree(workspace) == before


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("torch-distributed-family-name", "trainium-mpi")],
                         ids=lambda c: c[0])
def test_the_pytest_fixture_refuses_with_the_sdks_text(case: tuple[str, dict[str, Any]], workspace: Path,
                                                       request: pytest.FixtureRequest) -> None:
    """The ``sagemaker_job`` fixture's emulator target, given estimator keyword arguments: refused
    as ``--real`` would refuse them (its ``run_real`` builds this very estimator)."""
    from fixtures.jobs import Options, make_factory

    _, kwargs = case
    expected = sdk_refusal(**_sdk_kwargs(workspace, kwargs))
    assert expected is not None
    results: list[Any] = []
    sagemaker_job = make_factory(node=request.node, tmp_path=workspace, target="emulator", results=results,
                                 options=Options(real=False, backend="process", keep_failed=False))
    before, children = _tree(workspace), set(our_processes())
    with pytest.raises(RequestError) as info:
        sagemaker_job(source_dir=workspace / "src", instance_count=2, **kwargs)
    assert expected.strip() in str(info.value)
    assert not results and _tree(workspace) == before and set(our_processes()) == children
