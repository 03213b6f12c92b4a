"""Which profile a job runs in when none is chosen: ``SAGEMAKER_EMULATOR_PROFILE``, else ``exact``,
for every entry point (``emulator.job.request.create`` behind ``emulator.run`` and the CLI, the SDK
sessions' client); a chosen profile wins; an unknown name in the variable is refused naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.errors import RequestError
from emulator.job import profiles
from emulator.job import request as rq
from emulator.sdk.client import EmulatorSageMakerClient
from emulator.sdk.s3 import S3Store


def _create(tmp_path: Path, **kwargs: object) -> rq.JobRequest:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return rq.create(entry_point="train.py", source_dir=tmp_path, output_path=tmp_path / "out",
                     job_name="profile-default", **kwargs)  # type: ignore[arg-type]


def test_without_the_variable_a_job_is_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(profiles.PROFILE_VAR, raising=False)
    assert _create(tmp_path).profile == "exact"


def test_the_variable_sets_the_default_and_a_chosen_profile_wins(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profiles.PROFILE_VAR, "ci")
    assert _create(tmp_path).profile == "ci"
    assert _create(tmp_path, profile="exact").profile == "exact"
    store = S3Store(tmp_path / "s3")
    assert EmulatorSageMakerClient(store, region="us-west-2").profile == "ci"
    assert EmulatorSageMakerClient(store, region="us-west-2", profile="exact").profile == "exact"


def test_an_unknown_name_in_the_variable_is_refused_naming_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profiles.PROFILE_VAR, "fast")
    with pytest.raises(RequestError) as refused:
        _create(tmp_path)
    assert refused.value.field == profiles.PROFILE_VAR and "fast" in str(refused.value)
