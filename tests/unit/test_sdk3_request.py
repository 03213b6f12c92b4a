"""SDK v3 request shape: accepted (no entry point, loose-file channels, plain hyperparameters), and
bad input refused before anything is written, naming the field.

Needs no SDK (the request is the CreateTrainingJob dict ModelTrainer sends, in the shape recorded in
the reference ``sagemaker-sdk-v3.md`` §2); limits come from botocore's SageMaker service model.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulator.diagnostics.quirks import detect
from emulator.errors import RequestError
from emulator.sdk.translate import Translated
from emulator.sdk.translate import from_create_training_job as _translate

_TRANSLATED: list[Translated] = []


def from_create_training_job(create: dict[str, Any]) -> Translated:
    translated = _translate(create)
    _TRANSLATED.append(translated)
    return translated


@pytest.fixture(autouse=True)
def _temp_dirs() -> Iterator[None]:
    """The caller (the SDK client) removes a translated request's temp folders when its job ends."""
    yield
    while _TRANSLATED:
        for d in _TRANSLATED.pop().temp_dirs:
            shutil.rmtree(d, ignore_errors=True)

#: ModelTrainer's AlgorithmSpecification (3.27.0, reference §2).
ENTRYPOINT = ["/bin/bash"]
ARGUMENTS = ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh "
                   "&& /opt/ml/input/data/sm_drivers/sm_train.sh"]


def _service_shape(name: str) -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker").shape_for(name)


@pytest.fixture
def v3_request(tmp_path: Path) -> dict[str, Any]:
    code, drivers, data = tmp_path / "code", tmp_path / "sm_drivers", tmp_path / "data"
    for d in (code, drivers / "distributed_drivers", data / "sub"):
        d.mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "requirements.txt").write_text("numpy\n")
    (drivers / "sm_train.sh").write_text("#!/bin/bash\n")
    (drivers / "distributed_drivers" / "torchrun_driver.py").write_text("")
    (drivers / "sourcecode.json").write_text(json.dumps({"source_dir": "src", "entry_script": "train.py",
                                                         "requirements": "requirements.txt"}))
    (data / "sub" / "a.csv").write_text("1\n")

    def channel(name: str, path: Path) -> dict[str, Any]:
        return {"ChannelName": name, "DataSource": {"FileDataSource": {"FileUri": path.as_uri()}}}

    return {
        "TrainingJobName": "v3-job-1",
        "AlgorithmSpecification": {"TrainingImage": "pytorch-training:2.5.1", "TrainingInputMode": "File",
                                   "ContainerEntrypoint": list(ENTRYPOINT), "ContainerArguments": list(ARGUMENTS)},
        "HyperParameters": {"epochs": "2", "note": "hello world", "cfg": '{"a": 1}'},
        "InputDataConfig": [channel("train", data), channel("code", code), channel("sm_drivers", drivers)],
        "OutputDataConfig": {"S3OutputPath": (tmp_path / "out").as_uri(), "CompressionType": "GZIP"},
        "ResourceConfig": {"InstanceType": "ml.g5.12xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "RoleArn": "arn:aws:iam::123456789012:role/R",
    }


def test_a_v3_request_is_accepted_as_sent(v3_request: dict[str, Any], tmp_path: Path) -> None:
    t = from_create_training_job(v3_request)
    r = t.request
    assert r.entry_point == "" and not any(r.source_dir.iterdir())  # /opt/ml/code stays empty
    assert r.container_command == (*ENTRYPOINT, *ARGUMENTS)
    assert dict(r.hyperparameters) == v3_request["HyperParameters"]  # plain strings, as given
    assert not any(k.startswith("sagemaker_") for k in r.hyperparameters)
    chans = {c.name: c for c in r.channels}
    assert chans["code"].copy and chans["sm_drivers"].copy and not chans["train"].copy
    assert r.requirements_file == tmp_path / "code" / "requirements.txt"
    spec = r.to_dict()["AlgorithmSpecification"]
    assert spec["ContainerEntrypoint"] == ENTRYPOINT and spec["ContainerArguments"] == ARGUMENTS


def test_no_requirements_when_source_code_names_none(v3_request: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "sm_drivers" / "sourcecode.json").write_text(json.dumps({"entry_script": "train.py"}))
    assert from_create_training_job(v3_request).request.requirements_file is None


@pytest.mark.parametrize(("value", "field", "problem"), [
    ("/bin/bash", "AlgorithmSpecification.ContainerEntrypoint", "must be a list of strings"),
    (["/bin/bash", 3], "AlgorithmSpecification.ContainerEntrypoint[1]", "not a string"),
    ([], "AlgorithmSpecification.ContainerEntrypoint", "has 0 item(s)"),
    (None, None, None),
])
def test_a_bad_container_entrypoint_is_refused(v3_request: dict[str, Any], tmp_path: Path,
                                               value: Any, field: str | None, problem: str | None) -> None:
    v3_request["AlgorithmSpecification"]["ContainerEntrypoint"] = value
    if value is None:  # arguments without an entrypoint
        field, problem = "AlgorithmSpecification.ContainerArguments", "without ContainerEntrypoint"
        del v3_request["AlgorithmSpecification"]["ContainerEntrypoint"]
    with pytest.raises(RequestError) as err:
        from_create_training_job(v3_request)
    assert err.value.field == field and problem in str(err.value) and err.value.allowed
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_container_command_limits_are_the_service_models(v3_request: dict[str, Any]) -> None:
    for shape_name, item_name, key in (("TrainingContainerEntrypoint", "TrainingContainerEntrypointString",
                                        "ContainerEntrypoint"),
                                       ("TrainingContainerArguments", "TrainingContainerArgument",
                                        "ContainerArguments")):
        most = _service_shape(shape_name).metadata["max"]
        longest = _service_shape(item_name).metadata["max"]
        spec = v3_request["AlgorithmSpecification"]
        spec[key] = ["x"] * most
        from_create_training_job(v3_request)  # at the limit: accepted
        spec[key] = ["x"] * (most + 1)
        with pytest.raises(RequestError, match=f"AlgorithmSpecification.{key}: has {most + 1} item"):
            from_create_training_job(v3_request)
        spec[key] = ["y" * (longest + 1)]
        with pytest.raises(RequestError, match=rf"AlgorithmSpecification.{key}\[0\]: {longest + 1} characters"):
            from_create_training_job(v3_request)
        spec[key] = list(ENTRYPOINT if key == "ContainerEntrypoint" else ARGUMENTS)


@pytest.mark.parametrize(("resource", "field"), [
    ({"InstanceType": "ml.nope.xlarge", "InstanceCount": 2}, "ResourceConfig.InstanceType"),
    ({"InstanceType": "ml.g5.12xlarge", "InstanceCount": 0}, "ResourceConfig.InstanceCount"),
])
def test_v3_instance_type_and_count_are_checked(v3_request: dict[str, Any], resource: dict[str, Any],
                                                field: str) -> None:
    v3_request["ResourceConfig"] = resource
    with pytest.raises(RequestError) as err:
        from_create_training_job(v3_request)
    assert err.value.field == field


def test_a_missing_channel_folder_is_refused(v3_request: dict[str, Any], tmp_path: Path) -> None:
    v3_request["InputDataConfig"][0]["DataSource"]["FileDataSource"]["FileUri"] = (tmp_path / "gone").as_uri()
    with pytest.raises(RequestError, match=r"InputDataConfig.train: .*gone is not an existing folder"):
        from_create_training_job(v3_request)


def test_v2_requests_still_need_an_entry_point(v3_request: dict[str, Any]) -> None:
    del v3_request["AlgorithmSpecification"]["ContainerEntrypoint"]
    del v3_request["AlgorithmSpecification"]["ContainerArguments"]
    with pytest.raises(RequestError) as err:
        from_create_training_job(v3_request)
    assert err.value.field == "HyperParameters.sagemaker_program" and "ContainerEntrypoint" in str(err.value)


# -- the v3 MPI driver's rank count (emulator.diagnostics.quirks) ---------------------------------------------
# The command line SDK v3 3.27.0's mpi_driver.py logs (reference §3; its get_mpirun_command's argv).
MPIRUN = ("Executing command: mpirun --host algo-1:2,algo-2:2 -np 2 --allow-run-as-root --tag-output "
          "-mca btl_tcp_if_include eth0 -mca plm_rsh_num_concurrent 2 -x NCCL_SOCKET_IFNAME=eth0 -x PATH "
          "{extra}/usr/bin/python3 -m mpi4py train.py --np 9 --epochs 2\n")


def test_v3_mpi_rank_count_quirk_names_idle_hosts_and_np() -> None:
    logs = {"algo-1": "Running MPI Driver\n" + MPIRUN.format(extra=""), "algo-2": "Running MPI Driver\n"}
    (w,) = [w for w in detect(logs, {}) if "-np" in w]
    assert "-np 2" in w and "algo-2 ran no rank (idle)" in w and "all on algo-1" in w and "4 slots" in w


def test_v3_mpi_rank_count_quirk_not_flagged_when_np_is_right() -> None:
    fixed = MPIRUN.replace("-np 2", "-np 4").format(extra="")
    later = MPIRUN.format(extra="-np 4 ")  # mpi_additional_options=["-np", "4"]: Open MPI takes the last
    one_host = MPIRUN.replace("algo-1:2,algo-2:2", "algo-1:2").format(extra="")
    for text in (fixed, later, one_host):
        assert not [w for w in detect({"algo-1": text}, {}) if "-np" in w], text
