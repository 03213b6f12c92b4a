"""S3 channels as S3 lists them: prefixes match keys by prefix, and a channel whose prefix lists no
object is refused at CreateTrainingJob, before any host starts, leaving nothing behind.

Oracles: moto's ``ListObjectsV2`` (what S3 lists for a prefix; moto is a separate implementation of
the S3 API, queried here with boto3 directly), SageMaker's ``ValidationException`` text as real
CreateTrainingJob calls report it ("No S3 objects found under S3 URL "s3://kedro-data" given in
input data source. Please ensure that the bucket exists in the selected region (us-east-1), that
objects exist under that S3 prefix, and that the role "…" has "s3:ListBucket" permissions on bucket
"kedro-data"."), and the file names real jobs got for a partial-key prefix
(aws/sagemaker-python-sdk#3612: ``s3://B/data/train`` over ``data/train-data.csv`` gives
``train-data.csv``). The SDK v3 variant is in ``test_sdk3_request.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import emulator
from emulator.errors import RequestError

from ..conftest import import_or_skip, our_processes
from ..unit.test_bad_input import _tree

import_or_skip("moto")

BUCKET = "qa-bucket"
KEYS = ["data/train-0.csv", "data/train-1.csv", "data/train/part-a.csv", "data/train/sub/part-b.csv",
        "data/trainval.csv", "data/test-0.csv", "other/train-9.csv"]
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
SAGEMAKER_TEXT = ('No S3 objects found under S3 URL "{uri}" given in input data source. Please ensure that the '
                  "bucket exists in the selected region ({region}), that objects exist under that S3 prefix, "
                  'and that the role "{role}" has "s3:ListBucket" permissions on bucket "{bucket}".')


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Any]:
    from emulator.sdk.s3 import S3Store

    s3 = S3Store(tmp_path / "s3", region="us-west-2").open()
    try:
        s3.ensure_bucket(BUCKET)
        for key in KEYS:
            s3.client.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        s3.client.put_object(Bucket=BUCKET, Key="empty-folder/", Body=b"")  # a console "folder"
        yield s3
    finally:
        s3.close()


def _listed(client: Any, prefix: str) -> list[str]:
    """The oracle: what moto's ListObjectsV2 lists under ``prefix`` (no folder markers)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []) if not o["Key"].endswith("/"))


def _create(tmp_path: Path, store: Any, uri: str) -> dict[str, Any]:
    import tarfile

    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "train.py").write_text("raise SystemExit('a refused job must never start this')\n")
    with tarfile.open(tmp_path / "sourcedir.tar.gz", "w:gz") as tar:
        tar.add(src / "train.py", arcname="train.py")
    store.client.upload_file(str(tmp_path / "sourcedir.tar.gz"), BUCKET, "job/source/sourcedir.tar.gz")
    return {
        "TrainingJobName": "qa-s3", "RoleArn": ROLE,
        "HyperParameters": {"sagemaker_program": '"train.py"',
                            "sagemaker_submit_directory": f'"s3://{BUCKET}/job/source/sourcedir.tar.gz"'},
        "AlgorithmSpecification": {"TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
                                   "pytorch-training:2.3.0-cpu-py311", "TrainingInputMode": "File"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
        "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": "FullyReplicated"}}}],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/out"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("prefix,names", [
    ("data/train-", ["train-0.csv", "train-1.csv"]),  # a partial key: whole file names (#3612)
    ("data/train", ["part-a.csv", "sub/part-b.csv", "train-0.csv", "train-1.csv", "trainval.csv"]),
    ("data/train/", ["part-a.csv", "sub/part-b.csv"]),
    ("data/train-0.csv", ["train-0.csv"]),  # one object
    ("data/", ["test-0.csv", "train-0.csv", "train-1.csv", "train/part-a.csv", "train/sub/part-b.csv",
               "trainval.csv"]),
])
def test_a_prefix_channel_holds_every_object_s3_lists(tmp_path: Path, store: Any, prefix: str,
                                                      names: list[str]) -> None:
    from emulator.sdk.translate import from_create_training_job

    listed = _listed(store.client, prefix)
    assert len(listed) == len(names)  # the oracle agrees with the file names the case expects
    translated = from_create_training_job(_create(tmp_path, store, f"s3://{BUCKET}/{prefix}"), store=store,
                                          region="us-west-2")
    try:
        [channel] = translated.request.channels
        assert _files(channel.path) == names
        # every listed object is in the channel once (each object's body is its key)
        assert sorted((channel.path / name).read_text() for name in names) == listed
    finally:
        for d in translated.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("prefix", ["datasets/mnist-trian/", "data/trian", "empty-folder/", "nothing"])
def test_a_prefix_without_objects_is_refused_with_sagemakers_text(tmp_path: Path, store: Any, prefix: str) -> None:
    from emulator.sdk.translate import from_create_training_job

    assert _listed(store.client, prefix) == []  # the oracle: S3 lists nothing there
    uri = f"s3://{BUCKET}/{prefix}"
    create = _create(tmp_path, store, uri)
    before = _tree(tmp_path)
    with pytest.raises(RequestError) as info:
        from_create_training_job(create, store=store, region="us-west-2")
    assert info.value.field == "InputDataConfig.train"
    assert SAGEMAKER_TEXT.format(uri=uri, region="us-west-2", role=ROLE, bucket=BUCKET) in str(info.value)
    after = _tree(tmp_path)
    assert set(after) - set(before) <= {p for p in after if p.startswith("s3/")}, "a refused job wrote files"
    assert not list((tmp_path / "s3").rglob("qa-s3"))


def test_a_bucket_that_does_not_exist_is_refused(tmp_path: Path, store: Any) -> None:
    from emulator.sdk.translate import from_create_training_job

    create = _create(tmp_path, store, "s3://no-such-bucket-qa/data/")
    with pytest.raises(RequestError) as info:
        from_create_training_job(create, store=store, region="us-west-2")
    assert 'No S3 objects found under S3 URL "s3://no-such-bucket-qa/data/"' in str(info.value)
    assert 'on bucket "no-such-bucket-qa"' in str(info.value)


# -- SDK v2: the estimator's fit() gets CreateTrainingJob's ValidationException --------------------
def test_sdk_v2_fit_on_an_empty_prefix_raises_validation_exception(tmp_path: Path) -> None:
    import_or_skip("sagemaker")
    from botocore.exceptions import ClientError
    from sagemaker.pytorch import PyTorch

    from emulator.sdk.session import EmulatorSession

    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("raise SystemExit('a refused job must never start this')\n")
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train.csv").write_text("1,2\n")
    session = EmulatorSession(region="us-west-2", s3_root=tmp_path / "s3")
    try:
        good = session.upload_data(str(tmp_path / "mnist"), key_prefix="datasets/mnist-train")
        typo = good.replace("mnist-train", "mnist-trian") + "/"  # the typo
        est = PyTorch(entry_point="train.py", source_dir=str(src), role=ROLE, framework_version="2.3.0",
                      py_version="py311", instance_count=2, instance_type="ml.m5.xlarge",
                      sagemaker_session=session, base_job_name="qa-empty-prefix")
        children = set(our_processes())
        with pytest.raises(ClientError) as info:
            est.fit({"train": typo}, wait=False, logs="None")
        err = info.value.response["Error"]
        assert err["Code"] == "ValidationException"
        bucket = typo.split("/")[2]
        assert SAGEMAKER_TEXT.format(uri=typo, region="us-west-2", role=ROLE, bucket=bucket) in err["Message"]
        assert info.value.operation_name == "CreateTrainingJob"
        assert set(our_processes()) == children, "a refused job started processes"
        assert not list((tmp_path / "s3").rglob("job.json"))
    finally:
        session.close()


# -- emulator.run: a local folder stands for the channel's S3 prefix ------------------------------
def test_emulator_run_refuses_an_empty_channel_folder(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("raise SystemExit('a refused job must never start this')\n")
    (tmp_path / "data" / "nested").mkdir(parents=True)  # folders, but no file: no S3 object
    before = _tree(tmp_path)
    children = set(our_processes())
    with pytest.raises(RequestError) as info:
        emulator.run(entry_point="train.py", source_dir=src, channels={"train": tmp_path / "data"},
                     output_path=tmp_path / "out", job_name="qa-empty", echo=False)
    assert info.value.field == "InputDataConfig.train"
    assert f'No S3 objects found under S3 URL "{(tmp_path / "data").as_uri()}" given in input data source.' \
        in str(info.value)
    assert "(allowed: " in str(info.value)
    assert _tree(tmp_path) == before and set(our_processes()) == children
