"""Where the image build runs from (emulator/backends/docker/context.py): a checkout's docker/, or an
installed wheel's copy laid out as a checkout. The image tag is a hash of the files' contents, so the
wheel's layout must give the checkout's tags (the installed emulator finds the images a checkout
built); the real wheel, installed outside the checkout, runs in .ci/installed."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from emulator.backends.docker import context
from emulator.backends.docker.names import BUILD_SCRIPT
from emulator.job import dlc, frameworks

CHECKOUT_DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _load(script: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def wheel_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An install without a checkout: the wheel's package-data folder, holding docker/'s files."""
    packaged = tmp_path / "site-packages" / "context"
    packaged.mkdir(parents=True)
    for name in context.FILES:
        shutil.copy2(CHECKOUT_DOCKER / name, packaged / name)
    monkeypatch.setattr(context, "BUILD_SCRIPT", tmp_path / "no-checkout" / "docker" / "build.py")
    monkeypatch.setattr(context, "PACKAGED", packaged)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the laid-out build.py prepends its root
    return packaged


def test_a_checkout_runs_its_own_docker_build_py() -> None:
    assert BUILD_SCRIPT == CHECKOUT_DOCKER / "build.py"
    assert context.build_script() == BUILD_SCRIPT and context.available()


def test_a_wheels_copy_is_laid_out_as_a_checkout_and_gives_the_checkouts_tags(
        wheel_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = context.build_script(tmp_path / "cache")
    assert script is not None and script.is_relative_to(tmp_path / "cache") and context.available()
    assert (script.parents[1] / "emulator" / "backends" / "manifest.py").read_bytes() == context.MANIFEST.read_bytes()
    assert (script.parent / "build-base.sh").stat().st_mode & 0o100
    checkout = _load(BUILD_SCRIPT, "_test_checkout_build")
    installed = _load(script, "_test_installed_build")
    assert installed.MANIFEST_SCRIPT.is_file() and installed.BUILD.is_relative_to(tmp_path / "cache")
    base = "sha256:" + "0" * 64  # image_hash takes the base's id; no engine needed
    for image_id in ("pytorch-1.12-gpu", "pytorch-2.5-cpu", "huggingface-4.49.0-pytorch-2.5-gpu"):
        install = frameworks.install_set(dlc.image(image_id))
        assert installed.image_hash(install, base) == checkout.image_hash(install, base), image_id
    default = checkout.resolve()
    assert installed.name(default) == "default" and installed.image_hash(default, base) == checkout.image_hash(
        default, base)


def test_the_layout_is_made_once_and_other_files_get_a_folder_of_their_own(tmp_path: Path) -> None:
    files = {"docker/build.py": b"one", "docker/build-base.sh": b"#!/bin/sh\n", "emulator/backends/manifest.py": b""}
    first = context.layout(tmp_path, files)
    assert first.read_bytes() == b"one"
    first.write_bytes(b"changed here")  # a second call reuses the folder, it does not rewrite it
    assert context.layout(tmp_path, files) == first and first.read_bytes() == b"changed here"
    other = context.layout(tmp_path, {**files, "docker/build.py": b"two"})
    assert other != first and other.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({first.parents[1].name, other.parents[1].name})


def test_an_install_without_either_cannot_build_and_says_so(wheel_copy: Path) -> None:
    (wheel_copy / "Dockerfile").unlink()
    assert context.build_script() is None and not context.available()


def test_the_ci_example_image_copies_every_folder_the_wheel_is_built_from() -> None:
    """ci-examples/Dockerfile pip-installs the project from the folders it copies; setuptools refuses
    the build when a package-dir of pyproject.toml is missing (``package directory 'docker' does not
    exist``: a CI run failed on it), and the root .dockerignore must let each of them through."""
    import tomllib
    root = CHECKOUT_DOCKER.parent
    package_dirs = set(tomllib.loads((root / "pyproject.toml").read_text())
                       ["tool"]["setuptools"]["package-dir"].values())
    copied = {source for line in (root / "ci-examples" / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") for source in line.split()[1:-1]}
    assert package_dirs and package_dirs <= copied, package_dirs - copied
    allowed = {line[1:] for line in (root / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    assert copied <= allowed, copied - allowed


def test_an_images_context_has_one_pip_run_per_step_in_awss_order() -> None:
    """The docker build installs as the process backend's layers do: a PyTorch image in one
    resolution with its torch builds (then its ``--no-deps`` ones); a Hugging Face image's base set
    with the torch builds, then one run per ``pip install`` command of its own file (AWS's
    huggingface/pytorch/training/docker/2.8/py3/cu129/Dockerfile.gpu ends with ``pip install -U ...
    "s3fs==2025.9.0" ...`` after ``pip uninstall -y ray pyctcdecode``), then the uninstalls."""
    build = _load(BUILD_SCRIPT, "sm_emulator_docker_build_steps")
    dockerfile = (CHECKOUT_DOCKER / "Dockerfile").read_text()
    assert "/tmp/steps/steps.txt" in dockerfile and "/tmp/steps/uninstall.txt" in dockerfile
    plain = frameworks.install_set(dlc.image("pytorch-2.8-gpu"))
    files = build.step_files(build.inputs(plain))
    assert files["steps.txt"] == f"00.in {plain.uploaded_prior_to} -\n" and files["uninstall.txt"] == ""
    torch = [r.replace("===", "==") for r in plain.torch]  # PyPI's builds: no local label to match exactly
    assert files["00.in"].splitlines() == [*torch, *plain.packages]
    hf = frameworks.install_set(dlc.huggingface_versions()["4.56.2"])
    files = build.step_files(build.inputs(hf))
    lines = [line.split() for line in files["steps.txt"].splitlines()]
    assert len(lines) == len(hf.steps) and [flag == "no-deps" for _, _, flag in lines] == [s.no_deps for s in hf.steps]
    assert files["00.in"].splitlines()[:len(torch)] == torch
    assert "s3fs==2025.9.0" in files[lines[-1][0]].splitlines()
    assert set(files["uninstall.txt"].split()) == {"ray", "pyctcdecode", "sigopt"}
