"""A docker image build that would not fit is refused before it starts (emulator/backends/docker/images.py).

The need is the measured peak of a cold build (``images.BUILD_PEAK_BYTES``); the free space comes
from the folder's file system (``shutil.disk_usage``), so the tests set the need around it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.backends import layers
from emulator.backends.docker import images
from emulator.errors import BackendUnavailable
from emulator.job import dlc


def test_a_build_that_would_not_fit_is_refused_naming_the_numbers_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free = shutil.disk_usage(tmp_path).free
    monkeypatch.setitem(images.BUILD_PEAK_BYTES, "nvidia", free + 10**12)
    image = dlc.huggingface_image("4.56.2", field="image_uri")
    with pytest.raises(BackendUnavailable) as info:
        images.require_disk(image, str(tmp_path))
    message = str(info.value)
    assert image.label in message and str(tmp_path) in message
    assert f"needs about {(free + 10**12) / 1e9:.0f} GB" in message and f"{free / 1e9:.1f} GB are free" in message
    assert "python -m emulator cache prune" in message


def test_a_build_that_fits_or_an_engine_folder_not_here_is_not_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    free = shutil.disk_usage(tmp_path).free
    monkeypatch.setitem(images.BUILD_PEAK_BYTES, "nvidia", free // 2)
    monkeypatch.setitem(images.BUILD_PEAK_BYTES, "1.12", free + 10**12)
    images.require_disk(dlc.pytorch_image("2.5", gpu=True), str(tmp_path))  # fits
    with pytest.raises(BackendUnavailable):  # 1.12 has its own need
        images.require_disk(dlc.pytorch_image("1.12", gpu=True), str(tmp_path))
    images.require_disk(dlc.pytorch_image("1.12", gpu=True), None)  # the engine did not say
    images.require_disk(dlc.pytorch_image("1.12", gpu=True), str(tmp_path / "elsewhere"))  # a remote engine's


def test_the_image_command_refuses_as_a_job_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``nox -s image`` / ``python docker/build.py`` run the same check, on the folder ``docker info``
    names (here: ``tmp_path``), and stop with its message before building anything."""
    build = images._build_module()
    install = build.resolve("pytorch-2.5-gpu", torch_index="pypi")  # PyPI's builds (the larger need), no probe
    free = shutil.disk_usage(tmp_path).free
    monkeypatch.setitem(images.BUILD_PEAK_BYTES, "nvidia", free + 10**12)
    asked: list[tuple[str, ...]] = []

    def docker_info(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        return subprocess.CompletedProcess(["docker", *args], 0, f"{tmp_path}\n", "")

    monkeypatch.setattr(build, "_docker", docker_info)
    with pytest.raises(SystemExit) as info:
        build.require_disk(install)
    assert asked == [("info", "-f", "{{.DockerRootDir}}")]
    assert str(info.value).startswith("image: building the image of ") and str(tmp_path) in str(info.value)
    monkeypatch.setitem(images.BUILD_PEAK_BYTES, "nvidia", free // 2)
    build.require_disk(install)  # fits: no exit


def test_a_jobs_image_is_looked_up_once_for_its_torch_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch source of a DLC's stand-in is chosen once per process (``images._TORCH_SOURCE``): the
    plan, the build check and the estimate of one job do not each ask docker about both sources'
    tags again, and every later call gives the install set of that first choice."""
    build = images._build_module()
    image = dlc.pytorch_image("2.5", gpu=True)
    looked_up: list[str] = []

    def image_id(tag: str) -> str | None:  # nothing built: each source's image and base are looked up
        looked_up.append(tag)
        return None

    monkeypatch.setattr(images, "_TORCH_SOURCE", {})
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, "pypi")  # no probe: PyPI's builds
    monkeypatch.setattr(build, "_image_id", image_id)
    monkeypatch.setattr(images, "_image_id", lambda tag: None)
    first = images.install_set(image)
    assert first.torch_index is None and looked_up == []  # `pypi`: chosen without asking docker
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, "http://127.0.0.1:9/simple")
    monkeypatch.setattr(layers, "_PROBED", {})
    monkeypatch.setattr(layers, "probe", lambda *a, **k: True)  # the index has the build
    chosen = images.install_set(image)
    asked = len(looked_up)
    assert chosen.torch_index == "http://127.0.0.1:9/simple" and asked > 0
    for _ in range(3):
        assert images.install_set(image) == chosen
    assert len(looked_up) == asked  # asked for the first choice only
    assert images.built_image(image) is None  # plan, build and the estimate: that choice's tag only
    assert len(looked_up) == asked + 1 and looked_up[-1] == build.base_tag(build.suite(chosen))
