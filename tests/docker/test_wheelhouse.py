"""The wheelhouse (emulator/backends/docker/wheelhouse.py): requirements resolved here, installed offline in hosts.

Oracle: the real toolkit's install step (``sagemaker_training.modules.install_requirements``,
which runs ``python -m pip install -r requirements.txt`` and raises ``InstallRequirementsError``
on failure) inside the emulator image with no network, and pip's own output (the toolkit's
integration test ``test_dummy.py`` expects ``Successfully installed pyfiglet-0.8.post1``).
Needs PyPI on this machine (as the toolkit's install needs it on SageMaker), a docker engine and
the default image.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.backends.docker import wheelhouse

from ..conftest import require

IMAGE = "sagemaker-emulator:latest"
INSTALL = ("import sys; from sagemaker_training import modules, errors\n"
           "try:\n    modules.install_requirements('/opt/ml/code', capture_error=True)\n"
           "except errors.InstallRequirementsError as e:\n"
           "    print('InstallRequirementsError', e); sys.exit(3)\n")


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0


@pytest.fixture
def _docker_image() -> None:
    """Skips locally, fails under ``CI=true`` (``require`` in conftest.py)."""
    require(f"resolving requirements in {IMAGE}", [] if _docker_ok() else [f"a docker engine and {IMAGE}"])


needs_docker = pytest.mark.usefixtures("_docker_image")


def _reqs(tmp_path: Path, text: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    req = code / "requirements.txt"
    req.write_text(text)
    return req


def test_pip_conf_and_mounts(tmp_path: Path) -> None:
    conf = wheelhouse.pip_conf()
    assert "no-index = true" in conf and f"find-links = {wheelhouse.HOST_WHEELHOUSE}" in conf
    house = wheelhouse.Wheelhouse(tmp_path, "k", True, "", ())
    assert house.mounts() == {"/opt/sm-emulator/wheelhouse": tmp_path / "wheels",
                              "/etc/pip.conf": tmp_path / "pip.conf"}
    assert wheelhouse.cache_key("x==1\n", "sha256:a") != wheelhouse.cache_key("x==2\n", "sha256:a")
    assert wheelhouse.cache_key("x==1\n", "sha256:a") != wheelhouse.cache_key("x==1\n", "sha256:b")


def _install_in_image(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    req = _reqs(tmp_path, text)
    house = wheelhouse.prepare(req.parent, IMAGE, cache=tmp_path / "cache")
    again = wheelhouse.prepare(req.parent, IMAGE, cache=tmp_path / "cache")
    assert again == house  # cached by (requirements, image)
    mounts = [f"--volume={req.parent}:/opt/ml/code"]
    mounts += [f"--volume={src}:{dst}:ro" for dst, src in house.mounts().items()]
    return subprocess.run(["docker", "run", "--rm", "--network", "none", *mounts, "--entrypoint",
                           "python", IMAGE, "-c", INSTALL + "import docopt, importlib.metadata as m; "
                           "print('ok', m.version('pyfiglet'))"],
                          capture_output=True, text=True, timeout=600)


@needs_docker
@pytest.mark.parametrize("files_mode", ["auto", "copy"])
def test_toolkit_installs_offline_from_the_wheelhouse(tmp_path: Path, files_mode: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolved in a helper container whose folders are bind mounts where the engine sees them
    (``auto`` here) or copied in and out through the engine's API (``copy``, as for an engine
    that does not share this machine's filesystem)."""
    monkeypatch.setenv("EMULATOR_DOCKER_FILES", files_mode)
    done = _install_in_image(tmp_path, "pyfiglet==0.8.post1\ndocopt==0.6.2\n")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Successfully installed" in out and "pyfiglet-0.8.post1" in out, out
    assert "ok 0.8.post1" in done.stdout  # pyfiglet 0.8 itself imports pkg_resources: not run
    assert "Processing /opt/sm-emulator/wheelhouse/docopt-0.6.2.tar.gz" in out  # built offline


@needs_docker
def test_unresolvable_requirement_fails_as_install_requirements_error(tmp_path: Path) -> None:
    done = _install_in_image(tmp_path, "sm-emulator-no-such-package==1.0\n")
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "InstallRequirementsError" in out
    assert "No matching distribution found for sm-emulator-no-such-package" in out
