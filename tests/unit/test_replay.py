"""``python -m emulator replay``: a recorded DescribeTrainingJob mapped onto a local request, and
every bad input refused before start (exit 2, the field named, nothing left behind).

Oracles, never the replay's own output: the documents come from the real SDK v2 ``PyTorch``
estimator launched against moto (which stores the CreateTrainingJob request and answers
DescribeTrainingJob with it), the request the SDK sent (captured on botocore's
``provide-client-params`` event) and botocore's SageMaker service model, against which every
document here is validated (``DescribeTrainingJobResponse``).
"""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import main

from ..conftest import import_or_skip

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
REGION = "us-west-2"
TRAIN = "import os\nprint('rank', os.environ.get('RANK'))\n"
DATA_BUCKET = "replay-data"


# -- oracles --------------------------------------------------------------------------------------
def service_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def assert_describe_shape(document: dict[str, Any]) -> None:
    """``document`` (the emulator's own ``Emulator`` object aside) is a DescribeTrainingJobResponse."""
    from botocore.validate import ParamValidator

    shape = service_model().shape_for("DescribeTrainingJobResponse")
    found = ParamValidator().validate({k: v for k, v in document.items() if k != "Emulator"}, shape)
    assert not found.has_errors(), found.generate_report()


def launch_v2(src: Path, **estimator: Any) -> tuple[str, dict[str, Any]]:
    """Launch the real SDK v2 ``PyTorch`` estimator against moto (inside ``mock_aws``); return the
    job name and the CreateTrainingJob request the SDK sent."""
    import boto3

    import_or_skip("sagemaker")
    from sagemaker import Session
    from sagemaker.pytorch import PyTorch

    boto = boto3.Session(region_name=REGION)
    client = boto.client("sagemaker")
    sent: dict[str, Any] = {}
    client.meta.events.register("provide-client-params.sagemaker.CreateTrainingJob",
                                lambda params, **_: sent.update(copy.deepcopy(params)))
    boto.client("s3").create_bucket(Bucket=DATA_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    kwargs: dict[str, Any] = dict(
        entry_point="train.py", source_dir=str(src), role=ROLE, framework_version="2.2.0", py_version="py310",
        instance_type="ml.p4d.24xlarge", instance_count=4, distribution={"torch_distributed": {"enabled": True}},
        hyperparameters={"epochs": 2, "name": "x y", "cfg": {"a": [1, 2.5]}, "flag": True},
        checkpoint_s3_uri="s3://replay-ckpt/run-1", environment={"FOO": "bar"})
    kwargs.update(estimator)
    est = PyTorch(sagemaker_session=Session(boto_session=boto, sagemaker_client=client), **kwargs)
    est.fit({"training": f"s3://{DATA_BUCKET}/train/", "validation": f"s3://{DATA_BUCKET}/val/"},
            wait=False, logs=False)
    return est.latest_training_job.name, sent


def describe(name: str) -> dict[str, Any]:
    import boto3

    from emulator.replay.source import jsonable

    found = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)
    found.pop("ResponseMetadata")
    return jsonable(found)  # as `aws sagemaker describe-training-job` prints it: ISO time strings


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("replay")
    for name in ("src", "train", "val"):
        (root / name).mkdir()
    (root / "src" / "train.py").write_text(TRAIN)
    (root / "train" / "a.csv").write_text("1\n")
    (root / "val" / "b.csv").write_text("2\n")
    return root


@pytest.fixture(scope="module")
def v2(project: Path) -> dict[str, Any]:
    """The DescribeTrainingJob document of an SDK v2 job (moto), and the request the SDK sent."""
    moto = import_or_skip("moto")
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    with moto.mock_aws():
        name, sent = launch_v2(project / "src")
        document = describe(name)
    assert_describe_shape(document)
    return {"document": document, "sent": sent}


@pytest.fixture
def doc_file(v2: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(v2["document"]))
    return path


def write_doc(tmp_path: Path, document: Any, name: str = "doc.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def flags(project: Path, out: Path, *extra: str) -> list[str]:
    return ["--source-dir", str(project / "src"), "--channel", f"training={project / 'train'}",
            "--channel", f"validation={project / 'val'}", "--output-dir", str(out), "--backend", "process", *extra]


def temp_listing() -> set[str]:
    return set(os.listdir(tempfile.gettempdir()))


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], out: Path, command: str = "replay") -> str:
    """Run ``command argv``; assert exit 2, nothing new in the temp dir and no output dir; return stderr."""
    before = temp_listing()
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err
    assert temp_listing() == before, err
    assert not out.exists(), err
    return err


# -- the mapping --------------------------------------------------------------------------------------
@pytest.fixture
def planned(doc_file: Path, project: Path, tmp_path: Path,
            capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[dict[str, Any], str, Path]]:
    out = tmp_path / "replay-out"
    before = temp_listing()
    assert main(["replay", str(doc_file), "--plan", *flags(project, out, "--hosts", "2", "--gpus-per-host", "2")]) == 0
    captured = capsys.readouterr()
    assert temp_listing() == before and not out.exists()  # --plan starts nothing and writes nothing
    yield json.loads(captured.out), captured.err, out


def test_a_v2_job_keeps_its_hyperparameters_byte_for_byte(planned: tuple[dict[str, Any], str, Path],
                                                          v2: dict[str, Any]) -> None:
    plan, _, _ = planned
    sent = v2["sent"]["HyperParameters"]
    assert plan["request"]["HyperParameters"] == sent
    for host in plan["hosts"]:
        assert json.loads(host["files"]["/opt/ml/input/config/hyperparameters.json"]) == sent


def test_a_v2_job_scales_hosts_and_maps_channels_and_code(planned: tuple[dict[str, Any], str, Path],
                                                          project: Path, v2: dict[str, Any]) -> None:
    plan, report, out = planned
    assert v2["sent"]["ResourceConfig"]["InstanceCount"] == 4
    assert [h["name"] for h in plan["hosts"]] == ["algo-1", "algo-2"]
    assert {h["emulated_gpus"] for h in plan["hosts"]} == {2}
    assert plan["request"]["ResourceConfig"]["InstanceType"] == v2["sent"]["ResourceConfig"]["InstanceType"]
    for launch in plan["launch"]["hosts"]:
        mounts = {m["target"]: m["source"] for m in launch["mounts"]}
        assert mounts["/opt/ml/input/data/training"] == str(project / "train")
        assert mounts["/opt/ml/input/data/validation"] == str(project / "val")
        assert launch["environment"]["AWS_REGION"] == REGION  # the recorded ARN's region
        assert launch["environment"].get("FOO") == "bar" or "Environment" not in v2["document"]  # moto drops it
    config = json.loads(plan["hosts"][0]["files"]["/opt/ml/input/config/inputdataconfig.json"])
    assert sorted(config) == ["training", "validation"]
    assert f"s3://{DATA_BUCKET}/train/ → {project / 'train'} (--channel)" in report
    assert "hosts: 4 → 2 (--hosts)" in report
    assert "DebugHookConfig" in report.split("not replayed:")[1]  # the SDK sends one; not replayed
    assert str(out) in plan["request"]["OutputDataConfig"]["S3OutputPath"]
    assert plan["request"]["CheckpointConfig"]["S3Uri"].startswith((out / "checkpoints").as_uri())


def test_the_replay_gets_a_new_valid_name(planned: tuple[dict[str, Any], str, Path], v2: dict[str, Any]) -> None:
    plan, _, _ = planned
    shape = service_model().shape_for("TrainingJobName")
    name = plan["request"]["TrainingJobName"]
    assert re.fullmatch(shape.metadata["pattern"], name) and len(name) <= shape.metadata["max"]
    assert name != v2["document"]["TrainingJobName"] and "-replay-" in name
    assert plan["launch"]["hosts"][0]["environment"]["TRAINING_JOB_NAME"] == name


def test_what_is_not_replayed_is_reported_and_response_fields_dropped(v2: dict[str, Any], project: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(v2["document"])
    doc.update(VpcConfig={"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
               ProfilerConfig={"S3OutputPath": "s3://b/", "DisableProfiler": False},
               EnableManagedSpotTraining=True, RetryStrategy={"MaximumRetryAttempts": 2},
               WarmPoolStatus={"Status": "Available"}, ProfilingStatus="Enabled")
    doc["StoppingCondition"]["MaxWaitTimeInSeconds"] = 90_000
    assert_describe_shape(doc)
    assert main(["replay", str(write_doc(tmp_path, doc)), "--plan", *flags(project, tmp_path / "out")]) == 0
    report = capsys.readouterr().err
    not_replayed = report.split("not replayed:")[1].split("response fields dropped:")[0]
    assert {"VpcConfig", "ProfilerConfig", "DebugHookConfig"} <= set(re.findall(r"^\s+(\w+):", not_replayed, re.M))
    dropped = report.split("response fields dropped:")[1]
    for response_only in ("WarmPoolStatus", "ProfilingStatus", "ModelArtifacts", "TrainingJobStatus",
                          "SecondaryStatusTransitions", "TrainingJobArn", "CreationTime"):
        assert response_only in dropped
    assert "EnableManagedSpotTraining true" in report and "RetryStrategy {'MaximumRetryAttempts': 2}" in report
    assert "MaxWaitTimeInSeconds 90000" in report


def test_a_long_name_is_cut_to_the_service_limit() -> None:
    from emulator.replay.mapping import replay_name

    shape = service_model().shape_for("TrainingJobName")
    for recorded in ("a" * 63, "x" * 44 + "-" * 10 + "y", "job"):
        name = replay_name(recorded)
        assert re.fullmatch(shape.metadata["pattern"], name) and len(name) <= shape.metadata["max"], name


def test_a_job_by_name_is_read_with_boto3_and_its_code_downloaded(project: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    moto = import_or_skip("moto")
    out = tmp_path / "out"
    with moto.mock_aws():
        name, sent = launch_v2(project / "src")
        arn = f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}"
        assert_describe_shape(describe(name))
        before = temp_listing()
        capsys.readouterr()  # the SDK's own "sagemaker.config INFO" lines are not the plan
        argv = [arn, "--plan", "--channel", f"training={project / 'train'}", "--channel",
                f"validation={project / 'val'}", "--output-dir", str(out), "--backend", "process",
                "--emit-pytest", str(tmp_path / "test_emitted.py")]
        assert main(["replay", *argv]) == 0
    captured = capsys.readouterr()
    assert temp_listing() == before  # the downloaded sourcedir.tar.gz went with the replay
    plan = json.loads(captured.out)
    assert plan["request"]["HyperParameters"] == sent["HyperParameters"]
    submitted = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])
    assert f"code: {submitted} → " in captured.err and "(downloaded)" in captured.err
    kept = tmp_path / "test_emitted.sourcedir.tar.gz"  # the emitted test keeps its own copy
    assert kept.is_file() and repr(str(kept)) in (tmp_path / "test_emitted.py").read_text()


def test_the_emitted_module_holds_the_document_and_the_folders(doc_file: Path, project: Path, tmp_path: Path,
                                                               v2: dict[str, Any],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "test_replayed.py"
    assert main(["replay", str(doc_file), "--emit-pytest", str(target), *flags(project, tmp_path / "o")]) == 0
    capsys.readouterr()
    namespace: dict[str, Any] = {}
    exec(compile(target.read_text(), str(target), "exec"), namespace)
    assert namespace["DOCUMENT"] == v2["document"]
    assert namespace["CHANNELS"] == {"training": str(project / "train"), "validation": str(project / "val")}
    assert namespace["SOURCE_DIR"] == str(project / "src")
    assert namespace["RECORDED_STATUS"] == v2["document"]["TrainingJobStatus"]
    assert not (tmp_path / "o").exists()


def test_the_emitted_test_asserts_the_fix_and_xfails_the_recorded_failure(
        v2: dict[str, Any], project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--expect fix`` (the default): a failed job's test asserts Completed under a strict xfail whose
    reason is the recorded FailureReason's first line; ``--expect recorded`` asserts the recorded
    outcome, as before; a Completed job's test has no marker either way. (Run for real, xfail and
    XPASS(strict), in tests/jobs/test_replay_jobs.py.)"""
    failed = copy.deepcopy(v2["document"])
    failed.update(TrainingJobStatus="Failed", FailureReason="AlgorithmError: ExecuteUserScriptError:\n"
                                                            "ValueError: replay-me: rank 1 failed on purpose")
    source = write_doc(tmp_path, failed, "failed.json")
    modules = {}
    for name, extra in (("fix", []), ("explicit", ["--expect", "fix"]), ("recorded", ["--expect", "recorded"])):
        target = tmp_path / f"test_{name}.py"
        assert main(["replay", str(source), "--emit-pytest", str(target), *extra,
                     *flags(project, tmp_path / "o")]) == 0
        modules[name] = target.read_text()
    capsys.readouterr()
    fix = modules["fix"]
    assert fix == modules["explicit"].replace("test_explicit.py", "test_fix.py")
    assert ("@pytest.mark.xfail(strict=True, raises=RecordedFailure, "
            "reason='AlgorithmError: ExecuteUserScriptError:')") in fix
    assert 'assert result.status == "Completed", result.failure_reason' in fix
    assert "drop this marker" in fix and "--expect fix" in fix
    recorded = modules["recorded"]
    assert "xfail" not in recorded and "import pytest" not in recorded and "--expect recorded" in recorded
    assert "assert result.status == RECORDED_STATUS, result.failure_reason" in recorded
    for text in modules.values():
        namespace = namespace_of(text)
        assert namespace["RECORDED_STATUS"] == "Failed" and namespace["DOCUMENT"] == failed
    namespace = namespace_of(fix)
    test = next(value for key, value in namespace.items() if key.startswith("test_replay_"))
    assert [(m.name, m.kwargs) for m in test.pytestmark] == [("xfail", {
        "strict": True, "raises": namespace["RecordedFailure"], "reason": "AlgorithmError: ExecuteUserScriptError:"})]
    # a Completed job: nothing to xfail, Completed asserted, by either --expect
    done = copy.deepcopy(v2["document"])
    done["TrainingJobStatus"] = "Completed"
    source = write_doc(tmp_path, done, "done.json")
    for extra in ([], ["--expect", "recorded"]):
        target = tmp_path / "test_done.py"
        assert main(["replay", str(source), "--emit-pytest", str(target), *extra, *flags(project, tmp_path / "o")]) == 0
        assert "xfail" not in target.read_text() and "RECORDED_STATUS = 'Completed'" in target.read_text()
    capsys.readouterr()
    assert not (tmp_path / "o").exists()


def namespace_of(text: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(text, "test_emitted.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("argv, message", [
    (["--emit-pytest", "test_x.py", "--expect", "green"], "argument --expect: invalid choice: 'green'"),
    (["--expect", "recorded"], "argument --expect: applies to --emit-pytest only")])
def test_expect_is_refused_by_the_parser(doc_file: Path, project: Path, tmp_path: Path, argv: list[str],
                                         message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A value that is not fix|recorded, or ``--expect`` without ``--emit-pytest``: exit 2, the field
    named, nothing written or started."""
    argv = [str(tmp_path / a) if a.endswith(".py") else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        main(["replay", str(doc_file), *argv, *flags(project, tmp_path / "o")])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "test_x.py").exists() and not (tmp_path / "o").exists()


def test_an_emulator_job_json_gpu_scale_down_is_read_back(tmp_path: Path) -> None:
    """The sentence the emulator writes (emulator.job.deviations) is the one read back."""
    from emulator.job import request as rq
    from emulator.job.deviations import for_request
    from emulator.replay.mapping import recorded_gpus

    (tmp_path / "train.py").write_text(TRAIN)
    req = rq.create(entry_point=str(tmp_path / "train.py"), instance_type="ml.p4d.24xlarge", gpus_per_host=3,
                    output_path=tmp_path / "out", job_name="gpus")
    assert recorded_gpus({"Emulator": {"Deviations": for_request(req, None)}}) == 3
    assert recorded_gpus({"Emulator": {"Deviations": []}}) is None


def test_first_line_ignores_hosts_ports_and_pids() -> None:
    from emulator.replay import first_line

    a = "AlgorithmError: error on algo-2 (10.0.0.3:7777, pid: 26)\nmore"
    b = "AlgorithmError: error on algo-1 (10.0.0.2:29500, pid: 311)\nother"
    assert first_line(a) == first_line(b) != first_line("AlgorithmError: another error")
    assert first_line(None) == first_line("") == ""


# -- refusals -------------------------------------------------------------------------------------------
def test_a_job_folder_is_read_as_its_job_json(doc_file: Path, project: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(doc_file.parent), "--plan", *flags(project, tmp_path / "out")]) == 0
    assert f"({doc_file})" in capsys.readouterr().err.splitlines()[0]
    (tmp_path / "empty").mkdir()
    err = refused([str(tmp_path / "empty"), "--output-dir", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert "error: SOURCE: " in err and "without a job.json" in err


def test_a_file_that_is_not_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.json"
    path.write_text("{not json")
    assert "SOURCE:" in refused([str(path), "--output-dir", str(tmp_path / "out")], capsys, tmp_path / "out")


@pytest.mark.parametrize("missing", ["AlgorithmSpecification", "ResourceConfig", "TrainingJobStatus"])
def test_a_document_that_is_no_describe_training_job(missing: str, v2: dict[str, Any], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The two fields a replay maps, and TrainingJobStatus, which botocore's model requires of every
    DescribeTrainingJobResponse and against which the replay is judged."""
    if missing == "TrainingJobStatus":
        assert missing in service_model().shape_for("DescribeTrainingJobResponse").required_members
    doc = {k: v for k, v in v2["document"].items() if k != missing}
    err = refused([str(write_doc(tmp_path, doc)), "--output-dir", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert f"error: {missing}: missing" in err
    err = refused([str(write_doc(tmp_path, [doc])), "--output-dir", str(tmp_path / "out")], capsys, tmp_path / "out")
    assert "error: SOURCE:" in err


@pytest.mark.parametrize(("algorithm", "field", "says"), [
    ({"AlgorithmName": "arn:aws:sagemaker:us-west-2:594846645681:algorithm/some-marketplace-algo"},
     "AlgorithmSpecification.AlgorithmName", "built-in"),
    ({"TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.13.0-gpu-py310"},
     "AlgorithmSpecification.TrainingImage", "tensorflow-training images are not emulated"),
    ({"TrainingImage": "174872318107.dkr.ecr.us-west-2.amazonaws.com/linear-learner:1"},
     "AlgorithmSpecification.TrainingImage", "is not a PyTorch or Hugging Face DLC image"),
    ({"TrainingImage": "246618743249.dkr.ecr.us-west-2.amazonaws.com/sagemaker-xgboost:1.7-1"},
     "AlgorithmSpecification.TrainingImage", "is not a PyTorch or Hugging Face DLC image"),
])
def test_an_algorithm_or_image_that_is_not_pytorch(algorithm: dict[str, str], field: str, says: str,
                                                   v2: dict[str, Any], project: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(v2["document"])
    doc["AlgorithmSpecification"] = {"TrainingInputMode": "File", **algorithm}
    assert_describe_shape(doc)
    err = refused([str(write_doc(tmp_path, doc)), *flags(project, tmp_path / "out")], capsys, tmp_path / "out")
    assert f"error: {field}: " in err and says in err


def test_a_missing_source_dir(doc_file: Path, v2: dict[str, Any], project: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    given = [a for a in flags(project, out) if a not in ("--source-dir", str(project / "src"))]
    err = refused([str(doc_file), *given], capsys, out)
    submitted = json.loads(v2["sent"]["HyperParameters"]["sagemaker_submit_directory"])
    assert "error: --source-dir: missing" in err and submitted in err
    err = refused([str(doc_file), *given, "--source-dir", str(tmp_path / "nowhere")], capsys, out)
    assert "error: --source-dir: " in err and "does not exist" in err


def test_a_corrupt_source_tar(doc_file: Path, project: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "sourcedir.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 this is no gzip stream")
    out = tmp_path / "out"
    given = [a for a in flags(project, out) if a not in ("--source-dir", str(project / "src"))]
    err = refused([str(doc_file), *given, "--source-dir", str(bad)], capsys, out)
    assert "error: --source-dir: " in err and "not a readable .tar.gz" in err


def test_a_good_source_tar_is_taken(doc_file: Path, project: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile

    archive = tmp_path / "sourcedir.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(project / "src" / "train.py", arcname="train.py")
    out = tmp_path / "out"
    given = [a for a in flags(project, out) if a not in ("--source-dir", str(project / "src"))]
    before = temp_listing()
    assert main(["replay", str(doc_file), "--plan", *given, "--source-dir", str(archive)]) == 0
    assert f"→ {archive} (--source-dir)" in capsys.readouterr().err
    assert temp_listing() == before  # the extracted copy is gone


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_missing_or_corrupt_sourcedir_in_s3(damage: str, project: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A job read by name whose sourcedir.tar.gz (where the SDK uploaded it, moto's S3) is gone or
    is no gzip'd tar: refused naming sagemaker_submit_directory, the download removed."""
    import boto3

    moto = import_or_skip("moto")
    out = tmp_path / "out"
    with moto.mock_aws():
        name, sent = launch_v2(project / "src")
        bucket, _, key = json.loads(sent["HyperParameters"]["sagemaker_submit_directory"])[5:].partition("/")
        s3 = boto3.client("s3", region_name=REGION)
        if damage == "deleted":
            s3.delete_object(Bucket=bucket, Key=key)
        else:
            s3.put_object(Bucket=bucket, Key=key, Body=b"\x1f\x8b\x08\x00 this is no gzip stream")
        capsys.readouterr()
        arn = f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}"
        err = refused([arn, "--channel", f"training={project / 'train'}", "--channel", f"validation={project / 'val'}",
                       "--output-dir", str(out)], capsys, out)
    assert "error: HyperParameters.sagemaker_submit_directory: " in err
    assert ("cannot download s3://" in err) if damage == "deleted" else ("not a readable .tar.gz" in err)


def test_every_channel_still_needed_is_listed(doc_file: Path, project: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    err = refused([str(doc_file), "--source-dir", str(project / "src"), "--output-dir", str(out)], capsys, out)
    assert "error: InputDataConfig: 2 channel(s)" in err
    assert f"training (s3://{DATA_BUCKET}/train/)" in err and f"validation (s3://{DATA_BUCKET}/val/)" in err
    assert "--channel training=DIR --channel validation=DIR" in err
    err = refused([str(doc_file), *flags(project, out, "--channel", f"extra={project / 'train'}")], capsys, out)
    assert "error: --channel: extra: not a channel of the job" in err


def test_hosts_on_instance_groups(v2: dict[str, Any], project: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(v2["document"])
    doc["ResourceConfig"] = {"InstanceGroups": [{"InstanceGroupName": "a", "InstanceType": "ml.p4d.24xlarge",
                                                 "InstanceCount": 1},
                                                {"InstanceGroupName": "b", "InstanceType": "ml.c5.xlarge",
                                                 "InstanceCount": 1}], "VolumeSizeInGB": 30}
    assert_describe_shape(doc)
    out = tmp_path / "out"
    err = refused([str(write_doc(tmp_path, doc)), *flags(project, out, "--hosts", "2")], capsys, out)
    assert "error: --hosts: the job has instance groups" in err


def test_a_bad_host_count_is_the_translators_refusal(doc_file: Path, project: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    err = refused([str(doc_file), *flags(project, out, "--hosts", "0")], capsys, out)
    assert "error: ResourceConfig.InstanceCount: " in err


def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's credential chain finds nothing: no AWS_* variables, no files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_a_name_without_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    no_credentials(monkeypatch, tmp_path)
    out = tmp_path / "out"
    err = refused(["pytorch-training-2026-12-04-17-50-20-515", "--output-dir", str(out)], capsys, out)
    assert "error: SOURCE: " in err and "AWS credentials" in err
    assert "aws sagemaker describe-training-job --training-job-name pytorch-training-2026-12-04-17-50-20-515" in err


#: SDK v3 ModelTrainer's request (AlgorithmSpecification and channels as 3.27.0 sends them).
V3_ALGORITHM = {"TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311",
                "TrainingInputMode": "File", "ContainerEntrypoint": ["/bin/bash"],
                "ContainerArguments": ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh "
                                             "&& /opt/ml/input/data/sm_drivers/sm_train.sh"]}


def v3_document(v2: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(v2["document"])
    doc["AlgorithmSpecification"] = V3_ALGORITHM
    doc["HyperParameters"] = {"epochs": "2"}
    doc["InputDataConfig"] = [{"ChannelName": name, "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": f"s3://sagemaker-us-west-2-123456789012/job/{name}",
        "S3DataDistributionType": "FullyReplicated"}}} for name in ("code", "sm_drivers", "training")]
    assert_describe_shape(doc)
    return doc


def test_a_v3_job_needs_its_code_channels(v2: dict[str, Any], project: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, out = write_doc(tmp_path, v3_document(v2)), tmp_path / "out"
    err = refused([str(path), "--channel", f"training={project / 'train'}", "--output-dir", str(out)], capsys, out)
    assert "error: InputDataConfig: 2 channel(s)" in err
    assert "code (SDK v3's code channel" in err and "sm_drivers (SDK v3's driver scripts" in err
    err = refused([str(path), "--source-dir", str(project / "src"), "--output-dir", str(out)], capsys, out)
    assert "error: --source-dir: an SDK v3 (ModelTrainer) job has no source dir" in err


def test_a_v3_job_runs_its_container_entrypoint(v2: dict[str, Any], project: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    drivers = tmp_path / "sm_drivers"
    drivers.mkdir()
    (drivers / "sm_train.sh").write_text("#!/bin/bash\n")
    argv = [str(write_doc(tmp_path, v3_document(v2))), "--plan", "--channel", f"code={project / 'src'}",
            "--channel", f"sm_drivers={drivers}", "--channel", f"training={project / 'train'}",
            "--output-dir", str(tmp_path / "out"), "--backend", "process", "--framework-version", "current"]
    assert main(["replay", *argv]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runner"] == "container"
    assert plan["hosts"][0]["container_command"] == [*V3_ALGORITHM["ContainerEntrypoint"],
                                                     *V3_ALGORITHM["ContainerArguments"]]
    assert plan["request"]["HyperParameters"] == {"epochs": "2"}


def test_a_bad_profile(doc_file: Path, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert "error: --profile: unknown profile" in refused([str(doc_file), *flags(project, out, "--profile", "fast")],
                                                          capsys, out)


# -- profile and channel data ----------------------------------------------------------------------
def test_the_profile_an_emulator_job_json_records_is_the_default(v2: dict[str, Any], project: Path,
                                                                tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``Emulator.Profile`` (what ``emulator.description`` writes) is run again unless ``--profile``
    says otherwise; an unknown recorded profile is refused naming that field."""
    from emulator.replay import Options, prepare

    doc = {**copy.deepcopy(v2["document"]), "Emulator": {"Profile": "ci"}}
    where = dict(source_dir=project / "src", channels={"training": project / "train", "validation": project / "val"},
                 output_dir=tmp_path / "out")
    with prepare(doc, Options(**where)) as replay:
        assert replay.request.profile == "ci" and replay.profile_from == "Emulator.Profile in job.json"
    with prepare(doc, Options(**where, profile="exact")) as replay:
        assert replay.request.profile == "exact" and replay.profile_from == "--profile"
    with prepare(v2["document"], Options(**where)) as replay:  # a DescribeTrainingJob from AWS: no Emulator
        assert replay.request.profile == "exact" and replay.profile_from == "default"
    out = tmp_path / "out"
    path = write_doc(tmp_path, {**doc, "Emulator": {"Profile": "fast"}})
    assert "error: Emulator.Profile: unknown profile" in refused([str(path), *flags(project, out)], capsys, out)


#: Objects under the two channel prefixes, put in an order that is not the listing order; S3's
#: ListObjectsV2 lists keys in UTF-8 binary order (AWS S3 API reference, ListObjectsV2), so the
#: first two under ``train/`` are ``a.csv`` and ``b.csv``. A channel's files keep their path below
#: the prefix (the SageMaker layout ``emulator.sdk.s3.channel_name`` documents).
OBJECTS = {"train/sub/c.csv": "3\n", "train/b.csv": "2\n", "train/a.csv": "1\n", "train/": "",
           "val/x.csv": "9\n"}


def put_objects(objects: dict[str, str]) -> None:
    import boto3

    s3 = boto3.client("s3", region_name=REGION)
    for key, body in objects.items():
        s3.put_object(Bucket=DATA_BUCKET, Key=key, Body=body.encode())


def files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sample_downloads_the_first_objects_of_each_prefix(project: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--sample N`` with credentials (moto's S3): each channel without a folder gets the first N
    objects under its prefix, "folder" markers skipped; all goes when the replay ends."""
    moto = import_or_skip("moto")
    from emulator.replay import Options, prepare
    from emulator.replay.source import sampler

    out = tmp_path / "out"
    with moto.mock_aws():
        name, _ = launch_v2(project / "src")
        put_objects(OBJECTS)
        document = describe(name)
        before = temp_listing()
        with prepare(document, Options(source_dir=project / "src", sample=2, output_dir=out),
                     fetch_prefix=sampler(REGION)) as replay:
            local = {c.name: c.local for c in replay.channels}
            assert files(local["training"]) == {"a.csv": "1\n", "b.csv": "2\n"}
            assert files(local["validation"]) == {"x.csv": "9\n"}
            assert {c.name: c.recorded for c in replay.channels} == {
                "training": f"s3://{DATA_BUCKET}/train/", "validation": f"s3://{DATA_BUCKET}/val/"}
        assert temp_listing() == before
        with prepare(document, Options(source_dir=project / "src", sample=5, output_dir=out,
                                       channels={"validation": project / "val"}),
                     fetch_prefix=sampler(REGION)) as replay:
            local = {c.name: c.local for c in replay.channels}
            assert files(local["training"]) == {"a.csv": "1\n", "b.csv": "2\n", "sub/c.csv": "3\n"}
            assert local["validation"] == project / "val"  # --channel wins over --sample
        capsys.readouterr()
        path = write_doc(tmp_path, document)
        emitted = tmp_path / "test_emitted.py"
        assert main(["replay", str(path), "--plan", "--sample", "1", "--source-dir", str(project / "src"),
                     "--output-dir", str(out), "--backend", "process", "--emit-pytest", str(emitted)]) == 0
        err = capsys.readouterr().err
        assert temp_listing() == before and not out.exists()
        namespace: dict[str, Any] = {}  # the emitted test keeps its own copy of the sampled data
        exec(compile(emitted.read_text(), str(emitted), "exec"), namespace)
        kept = tmp_path / "test_emitted.channels"
        assert namespace["CHANNELS"] == {"training": str(kept / "training"), "validation": str(kept / "validation")}
        assert files(kept) == {"training/a.csv": "1\n", "validation/x.csv": "9\n"}
        assert f"training: s3://{DATA_BUCKET}/train/ → " in err
        assert "(sampled: the first 1 object(s) under the prefix (--sample 1))" in err
        assert "data: training, validation sampled from S3 (--sample), not the whole channel" in err
        # an empty prefix: SageMaker fails the job (no objects under the channel's URI); refused here
        empty = copy.deepcopy(document)
        empty["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] = f"s3://{DATA_BUCKET}/nothing/"
        err = refused([str(write_doc(tmp_path, empty, "empty.json")), "--sample", "1", "--source-dir",
                       str(project / "src"), "--output-dir", str(out)], capsys, out)
        assert f"error: InputDataConfig.validation: no objects under s3://{DATA_BUCKET}/nothing/" in err


def test_sample_without_credentials_is_refused(v2: dict[str, Any], project: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    no_credentials(monkeypatch, tmp_path)
    out = tmp_path / "out"
    path = write_doc(tmp_path, v2["document"])
    err = refused([str(path), "--sample", "3", "--source-dir", str(project / "src"), "--output-dir", str(out)],
                  capsys, out)
    assert "error: --sample: downloading channel data from S3 needs AWS credentials" in err
    err = refused([str(path), "--source-dir", str(project / "src"), "--output-dir", str(out)], capsys, out)
    assert "error: InputDataConfig: 2 channel(s) of the job have no folder" in err and "--sample N" in err
    err = refused([str(path), "--sample", "0", *flags(project, out)], capsys, out)
    assert "error: --sample: 0: not a positive number" in err


# -- plan SOURCE: replay --plan's output, the same code path ---------------------------------------------------
@pytest.fixture
def fixed_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every replay gets the name a replay at one fixed time gets, so that two runs print the same."""
    from emulator.replay import mapping

    named = mapping.replay_name
    monkeypatch.setattr(mapping, "replay_name", lambda recorded, now=None: named(recorded, 1_796_000_000.0))


def printed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``python -m emulator argv``; asserts it left nothing in the temp dir."""
    before = temp_listing()
    status = main(argv)
    captured = capsys.readouterr()
    assert temp_listing() == before, captured.err
    return status, captured.out, captured.err


def assert_plan_is_replay_plan(source: Path, given: list[str], capsys: pytest.CaptureFixture[str],
                               out: Path) -> dict[str, Any]:
    """``plan SOURCE given`` prints, on both streams, what ``replay SOURCE --plan given`` prints (the
    oracle: plan's contract is replay --plan's output); neither writes the output dir. The plan."""
    replayed = printed(["replay", str(source), "--plan", *given], capsys)
    planned = printed(["plan", str(source), *given], capsys)
    assert replayed[0] == 0, replayed[2]
    assert planned == replayed
    assert not out.exists()
    plan: dict[str, Any] = json.loads(planned[1])
    return plan


def test_plan_of_a_describe_training_job_file_is_replay_plan(doc_file: Path, project: Path, tmp_path: Path,
                                                             v2: dict[str, Any], fixed_names: None,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    plan = assert_plan_is_replay_plan(doc_file, flags(project, out, "--hosts", "2", "--gpus-per-host", "1"),
                                      capsys, out)
    assert plan["request"]["HyperParameters"] == v2["sent"]["HyperParameters"]  # it is the replay's plan
    assert [h["name"] for h in plan["launch"]["hosts"]] == ["algo-1", "algo-2"]


def test_plan_of_an_emulator_job_json_and_its_folder_is_replay_plan(v2: dict[str, Any], project: Path,
                                                                    tmp_path: Path, fixed_names: None,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The emulator's job.json (its ``Emulator`` object records the profile), as a file and as its
    job folder, and with ``--profile`` overriding the recorded one."""
    folder = tmp_path / "recorded-job"
    folder.mkdir()
    job = write_doc(folder, {**copy.deepcopy(v2["document"]), "Emulator": {"Profile": "ci"}}, "job.json")
    out = tmp_path / "out"
    for source in (job, folder):
        plan = assert_plan_is_replay_plan(source, flags(project, out), capsys, out)
        assert plan["request"]["TrainingJobName"].startswith(v2["document"]["TrainingJobName"] + "-replay-")
    assert_plan_is_replay_plan(job, flags(project, out, "--profile", "exact"), capsys, out)


def test_plan_of_an_entry_point_is_unchanged(project: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``plan --entry-point …`` prints ``plan_document`` of the request the Python API makes of the
    same values, whatever the option order; a script given as SOURCE is refused, never planned."""
    from emulator.cli import plan_document
    from emulator.job import request as rq

    out, script = tmp_path / "out", project / "src" / "train.py"
    request = rq.create(entry_point=str(script), instance_count=2, channels={"training": str(project / "train")},
                        output_path=out, job_name="plan-entry-point")
    expected = json.dumps(plan_document(request, "process"), indent=2, default=str) + "\n"
    given = ["--entry-point", str(script), "--hosts", "2", "--channel", f"training={project / 'train'}",
             "--output-dir", str(out), "--job-name", "plan-entry-point", "--backend", "process"]
    assert printed(["plan", *given], capsys) == (0, expected, "")
    assert printed(["plan", *given[2:], *given[:2]], capsys) == (0, expected, "")
    assert not out.exists()
    err = refused([str(script), "--output-dir", str(out)], capsys, out, command="plan")
    assert "error: SOURCE: " in err and "not JSON" in err and "--entry-point" in err


@pytest.mark.parametrize("bad", ["not a DescribeTrainingJob", "a list", "not JSON", "a name without credentials",
                                 "a folder without job.json", "a channel without a folder"])
def test_plan_refuses_a_source_as_replay_plan_does(bad: str, v2: dict[str, Any], project: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, the same message (the field named), nothing left behind, for ``plan`` and ``replay --plan``."""
    out = tmp_path / "out"
    given = flags(project, out)
    if bad == "not a DescribeTrainingJob":
        source = str(write_doc(tmp_path, {k: v for k, v in v2["document"].items() if k != "AlgorithmSpecification"}))
    elif bad == "a list":
        source = str(write_doc(tmp_path, [v2["document"]]))
    elif bad == "not JSON":
        source = str(tmp_path / "job.json")
        Path(source).write_text("{not json")
    elif bad == "a name without credentials":
        no_credentials(monkeypatch, tmp_path)
        source = "pytorch-training-2026-12-04-17-50-20-515"
    elif bad == "a folder without job.json":
        source = str(tmp_path / "empty")
        Path(source).mkdir()
    else:
        source = str(write_doc(tmp_path, v2["document"]))
        given = ["--source-dir", str(project / "src"), "--output-dir", str(out), "--backend", "process"]
    err = refused([source, *given], capsys, out, command="plan")
    assert err == refused([source, "--plan", *given], capsys, out)
    field = {"not a DescribeTrainingJob": "AlgorithmSpecification", "a channel without a folder": "InputDataConfig"}
    assert err.startswith(f"error: {field.get(bad, 'SOURCE')}: "), err
    if bad == "a name without credentials":
        assert "AWS credentials" in err


def test_plan_source_takes_only_what_plans(doc_file: Path, project: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``--emit-pytest`` and ``--expect`` (write a file) and ``--quiet`` (quiets a run) are replay's, not
    plan's: refused by the parser (exit 2), nothing written; so is a SOURCE with ``--entry-point``."""
    out = tmp_path / "out"
    for extra in (["--emit-pytest", str(tmp_path / "test_x.py")], ["--expect", "fix"], ["--quiet"],
                  ["--entry-point", "train.py"]):
        with pytest.raises(SystemExit) as exited:
            main(["plan", str(doc_file), *flags(project, out), *extra])
        assert exited.value.code == 2
        assert f"unrecognized arguments: {extra[0]}" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "test_x.py").exists()
