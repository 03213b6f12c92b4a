"""A job environment says when its requirements replace a package the DLC ships (real pip), and
job environments of one DLC image share its framework layers.

Two tiny local distributions stand for a DLC package and a requirement that needs a newer
release of it (as ``torchmetrics`` 1.8 needs torch>=2 under a torch 1.12 DLC): ``smemu-dlcpkg``
1.0 is the package of a stand-in DLC image (its layer also gets pip, from PyPI, as every DLC has
it), the requirements ask for ``smemu-needsnew``, which requires ``smemu-dlcpkg>=2``. pip (the
oracle) upgrades it and prints ``Collecting smemu-dlcpkg>=2 (from smemu-needsnew->...)``
(pip/_internal/req/req_install.py ``InstallRequirement.__str__``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.backends import jobenv, layers
from emulator.job import dlc

#: A DLC image whose only package is ``smemu-dlcpkg`` 1.0 (and pip, which every DLC has).
IMAGE = dlc.Image(id="test-smemu", flavour="pytorch", family="2.13", framework_version="0.0", transformers_version=None,
                  device="cpu", python="3.11", cuda=None, base=None, source_path="-", source_commit="-", date=None,
                  own=(dlc.Package("smemu-dlcpkg", "smemu-dlcpkg==1.0", "1.0"),), uninstalled=(), locked=None)
INSTALL = dlc.InstallSet(image=IMAGE, torch=(), packages=("smemu-dlcpkg==1.0", "pip"), no_deps=(), toolkits=(),
                         constraints=(), torch_constraints=(), uploaded_prior_to=None,
                         torch_uploaded_prior_to=None, gaps={}, torch_index=None)


def _wheel(tmp: Path, name: str, version: str, requires: list[str], out: Path) -> None:
    src = tmp / f"{name}-{version}"
    module = name.replace("-", "_")
    (src / module).mkdir(parents=True)
    (src / module / "__init__.py").write_text(f"VERSION = {version!r}\n")
    (src / "setup.py").write_text(
        "from setuptools import setup\n"
        f"setup(name={name!r}, version={version!r}, packages=[{module!r}], install_requires={requires!r})\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(src)], check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheels")
    out = tmp / "wheels"
    _wheel(tmp, "smemu-dlcpkg", "1.0", [], out)
    _wheel(tmp, "smemu-dlcpkg", "2.0", [], out)
    _wheel(tmp, "smemu-needsnew", "1.0", ["smemu-dlcpkg>=2"], out)
    _wheel(tmp, "smemu-fine", "1.0", ["smemu-dlcpkg>=1"], out)
    return out


def _prepare(tmp_path: Path, wheels: Path, requirement: str, monkeypatch: pytest.MonkeyPatch) -> str:
    _empty_caches(tmp_path, monkeypatch)
    return _env(tmp_path, wheels, "src", requirement)


def test_an_upgrade_of_a_dlc_pin_is_said_with_what_pulled_it(tmp_path: Path, wheels: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    python = _prepare(tmp_path, wheels, "smemu-needsnew", monkeypatch)
    (note,) = jobenv.replacement_notes(python)
    assert note.startswith("requirements.txt upgraded the DLC's smemu-dlcpkg 1.0 to 2.0 (pulled by smemu-needsnew")
    assert "On SageMaker the same pip step does the same" in note


def test_requirements_that_keep_the_dlc_pins_say_nothing(tmp_path: Path, wheels: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    python = _prepare(tmp_path, wheels, "smemu-fine", monkeypatch)
    assert jobenv.replacement_notes(python) == []


def test_a_torch_replacement_names_smddp_and_the_cuda_build() -> None:
    changed = jobenv.replacements({"torch": "1.12.1"}, {"torch": "2.8.0"},
                                  "Collecting torch>=2.0.0 (from torchmetrics>=0.4.1->pytorch-lightning==1.6.3->-r "
                                  "requirements.txt (line 1))\n")
    assert changed == [{"package": "torch", "before": "1.12.1", "after": "2.8.0",
                        "pulled_by": "torchmetrics>=0.4.1->pytorch-lightning==1.6.3->-r requirements.txt (line 1)"}]
    assert jobenv.replacements({"torch": "2.13.0+cpu"}, {"torch": "2.13.0"}, "") == []  # same release


def test_the_pip_lock_module_runs_on_its_own() -> None:
    """Every interpreter of a job environment imports this module at start-up (a ``.pth`` line), as a
    top-level module of the venv: it must run with nothing of the emulator importable."""
    done = subprocess.run([sys.executable, "-I", "-c", jobenv._PIP_LOCK_MODULE], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr


# -- the framework layer and the cache ---------------------------------------------------------
def _empty_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobenv, "CACHE", tmp_path / "envs")
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "frameworks")
    # the stand-in package comes from a local folder (the layers' pip leaves find-links out otherwise)
    monkeypatch.setattr(layers, "DROPPED_PIP_VARS", tuple(v for v in layers.DROPPED_PIP_VARS if v != "PIP_FIND_LINKS"))


def _env(tmp_path: Path, wheels: Path, name: str, requirement: str | None) -> str:
    src = tmp_path / name
    src.mkdir()
    if requirement is not None:
        (src / "requirements.txt").write_text(f"{requirement}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_FIND_LINKS": str(wheels)}
    python, prepared = jobenv.prepare(src, tmp_path / "scratch", tmp_path / "jobenv.log", INSTALL, env=env)
    assert prepared, (tmp_path / "jobenv.log").read_text()
    return python


def _imported(python: str, module: str) -> str:
    return subprocess.run([python, "-c", f"import {module}; print({module}.__file__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_job_environments_of_one_family_share_one_framework_layer(tmp_path: Path, wheels: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _empty_caches(tmp_path, monkeypatch)
    plain = _env(tmp_path, wheels, "plain", None)
    fine = _env(tmp_path, wheels, "fine", "smemu-fine")
    assert plain != fine
    layer = layers.image_layer(INSTALL).path
    assert layer.is_relative_to(tmp_path / "frameworks")
    for python in (plain, fine):  # the pin is installed once, in the layer, and both see it
        assert Path(_imported(python, "smemu_dlcpkg")).is_relative_to(layer)
    assert not list((tmp_path / "envs").glob("*/lib/python*/site-packages/smemu_dlcpkg"))
    # A requirement that replaces the pin shadows the layer and leaves it as it was.
    needs_new = _env(tmp_path, wheels, "new", "smemu-needsnew")
    assert Path(_imported(needs_new, "smemu_dlcpkg")).is_relative_to(tmp_path / "envs")
    assert "1.0" in (layer / "smemu_dlcpkg" / "__init__.py").read_text()


def test_an_environment_whose_interpreter_is_gone_is_removed_when_the_next_is_made(
        tmp_path: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    _empty_caches(tmp_path, monkeypatch)
    kept = Path(_env(tmp_path, wheels, "kept", None)).parent.parent
    gone = Path(_env(tmp_path, wheels, "gone", "smemu-fine")).parent.parent
    (gone / jobenv.ORIGIN).write_text(str(tmp_path / "a-removed-clone" / ".nox" / "tests"))
    busy = tmp_path / "envs" / "0123456789abcdef"  # being made by another job: no origin yet, locked
    busy.mkdir()
    with open(tmp_path / "envs" / f"{busy.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _env(tmp_path, wheels, "next", "smemu-needsnew")
    assert not gone.exists()
    assert kept.is_dir() and busy.is_dir()
