"""A framework layer's torch builds from a CPU index, or from PyPI where it is not reachable.

The layers' own code path runs (``layers.torch_source`` chooses, ``layers._install_base`` is the base
layer's pip step that ``layers.ensure`` runs), with the real pip, against indexes made here
(``tests/simple_index.py``): the "CPU index" is served over HTTP on 127.0.0.1, an HTML PEP 503 index
without upload times like download.pytorch.org, holding tiny ``+cpu`` wheels of the 2.13 DLC's
torch, torchvision and torchaudio; "PyPI" (the layers' ``PIP_INDEX_URL``, as a user's pip
configuration sets it) is a local folder holding the same releases without a label, as PyPI's CUDA
builds are, and ``tinydep``, which both torch wheels require and only "PyPI" has. The family's date
(pip's ``--uploaded-prior-to``) is passed as for a real family.

Oracles: pip's metadata of what it installed (``importlib.metadata``, PEP 376): which version of
each wheel landed, so which index it came from.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from emulator.backends import layers
from emulator.job import dlc, frameworks
from tests import simple_index

pytestmark = pytest.mark.slow

#: The 2.13 DLC's torch builds (AWS's build files: torch 2.13.0, torchvision 0.28.0, torchaudio 2.11.0).
TRIO = (("torch", "2.13.0"), ("torchvision", "0.28.0"), ("torchaudio", "2.11.0"))


def _of(index: str | None) -> dlc.InstallSet:
    return frameworks.install_set(dlc.image("pytorch-2.13-cpu"), torch_index=index)


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """(the CPU index's URL, "PyPI"'s file: URL, the paths the CPU index was asked for)."""
    wheels = tmp_path / "wheels"
    cpu = [simple_index.wheel(wheels / "cpu", name, f"{version}+cpu", requires=["tinydep"] if name == "torch" else [])
           for name, version in TRIO]
    pypi = [simple_index.wheel(wheels / "pypi", name, version, requires=["tinydep"] if name == "torch" else [])
            for name, version in TRIO]
    pypi.append(simple_index.wheel(wheels / "pypi", "tinydep", "1.0"))
    pypi_simple = simple_index.simple_folder(tmp_path / "pypi", pypi)
    cpu_simple = simple_index.simple_folder(tmp_path / "cpu", cpu)
    with simple_index.serve(cpu_simple.parent) as (url, requested):
        yield f"{url}/simple", pypi_simple.as_uri(), requested


def _installed(folder: Path) -> dict[str, str]:
    return {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(folder)])}


def _install(install: dlc.InstallSet, tmp_path: Path, pypi: str, name: str) -> tuple[bool, dict[str, str], str]:
    env = layers.pip_environment({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"),
                                  "PIP_INDEX_URL": pypi, "PIP_NO_CACHE_DIR": "1"})
    part, log = tmp_path / name, tmp_path / f"{name}.log"
    ok = layers._install_base(install, part, log, env)
    return ok, _installed(part) if ok else {}, log.read_text() if log.exists() else ""


def test_a_reachable_cpu_index_gives_the_cpu_builds(tmp_path: Path, indexes: tuple[str, str, list[str]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe finds the index; pip installs the three +cpu builds from it, and what they need from
    "PyPI", with the family's --uploaded-prior-to in force."""
    cpu_url, pypi, requested = indexes
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "layers")
    monkeypatch.setattr(layers, "_PROBED", {})
    install = layers.torch_source(_of, {dlc.TORCH_INDEX_VAR: cpu_url})
    assert install.torch_index == cpu_url and requested == ["/simple/torch/"]
    assert install.torch_uploaded_prior_to  # the real family's date reaches pip
    ok, found, log = _install(install, tmp_path, pypi, "cpu-layer")
    assert ok, log
    assert found == {**{name: f"{version}+cpu" for name, version in TRIO}, "tinydep": "1.0"}
    assert "--uploaded-prior-to" in log


def test_an_unreachable_cpu_index_falls_back_to_pypi(tmp_path: Path, indexes: tuple[str, str, list[str]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed loopback port: PyPI's builds are chosen, and they install."""
    _, pypi, _ = indexes
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "layers")
    monkeypatch.setattr(layers, "_PROBED", {})
    install = layers.torch_source(_of, {dlc.TORCH_INDEX_VAR: f"http://127.0.0.1:{simple_index.closed_port()}/simple"})
    assert install.torch_index is None
    ok, found, log = _install(install, tmp_path, pypi, "pypi-layer")
    assert ok, log
    assert found == {**dict(TRIO), "tinydep": "1.0"}


def test_pypi_disables_the_probe(tmp_path: Path, indexes: tuple[str, str, list[str]],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``SAGEMAKER_EMULATOR_TORCH_INDEX=pypi``: the CPU index is never asked, PyPI's builds install."""
    _, pypi, requested = indexes
    monkeypatch.setattr(layers, "LAYERS", tmp_path / "layers")
    monkeypatch.setattr(layers, "_PROBED", {})
    install = layers.torch_source(_of, {dlc.TORCH_INDEX_VAR: "pypi"})
    assert install.torch_index is None and requested == []
    ok, found, log = _install(install, tmp_path, pypi, "pypi-layer")
    assert ok, log
    assert found["torch"] == "2.13.0"


# -- the docker backend's images: docker/build.py and docker/torch-wheels.sh --------------------------
def _build_module():  # type: ignore[no-untyped-def]
    from emulator.backends.docker import images

    return images._build_module()


def test_an_image_build_takes_the_cpu_builds_from_the_index(tmp_path: Path, indexes: tuple[str, str, list[str]],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No image built yet and the index answers: ``docker/build.py`` chooses the +cpu builds, keeps them
    out of the first step's file, and ``torch-wheels.sh`` (the build's own script, run here with this
    machine's pip as the Dockerfile runs it with the image's) resolves, downloads and pins exactly the
    three from the index; the first step's pip run, as the Dockerfile makes it (``--find-links``, the
    family's date), then installs them and what they need from "PyPI"."""
    cpu_url, pypi, requested = indexes
    build = _build_module()
    monkeypatch.setattr(build, "_image_id", lambda tag: None)  # nothing built: the probe decides
    monkeypatch.setattr(layers, "_PROBED", {})
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, cpu_url)
    install = build.resolve("pytorch-2.13-cpu")
    assert install.torch_index == cpu_url and requested == ["/simple/torch/"]
    data = build.inputs(install)
    files = build.step_files(data)
    assert files["torch.in"].split() == list(install.torch) and "torch==" not in files["00.in"]
    assert build.torch_index_arg(install) == cpu_url
    pypi_install = build.resolve("pytorch-2.13-cpu", torch_index="pypi")
    assert build.step_files(build.inputs(pypi_install))["torch.in"] == ""
    assert build.image_hash(install, "base") != build.image_hash(pypi_install, "base")

    (tmp_path / "torch.in").write_text(files["torch.in"])
    (tmp_path / "constraints.txt").write_text("".join(f"{c}\n" for c in data["constraints"]))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "PIP_INDEX_URL": pypi,
           "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP": f"{sys.executable} -m pip"}
    dest = tmp_path / "torch-wheels"
    done = subprocess.run(["sh", str(build.HERE / "torch-wheels.sh"), cpu_url, str(tmp_path / "torch.in"),
                           str(tmp_path / "constraints.txt"), str(dest)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pins = (dest / "pins.txt").read_text().split()
    assert sorted(pins) == sorted(f"{name}=={version}+cpu" for name, version in TRIO)
    assert sorted(p.name.split("-")[0] for p in dest.glob("*.whl")) == sorted(name for name, _ in TRIO)
    target = tmp_path / "venv-site"
    date = data["steps"][0]["date"]
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target),
                           *(["--uploaded-prior-to", date] if date else []), "--find-links", str(dest),
                           "-r", str(dest / "pins.txt")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _installed(target) == {**{name: f"{version}+cpu" for name, version in TRIO}, "tinydep": "1.0"}
    # A family whose DLC leaves torchvision and torchaudio unpinned (2.0): the index's builds resolve.
    (tmp_path / "torch.in").write_text("torch==2.13.0+cpu\ntorchvision\ntorchaudio\n")
    unpinned = tmp_path / "unpinned"
    done = subprocess.run(["sh", str(build.HERE / "torch-wheels.sh"), cpu_url, str(tmp_path / "torch.in"),
                           str(tmp_path / "constraints.txt"), str(unpinned)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert sorted((unpinned / "pins.txt").read_text().split()) == sorted(pins)


def test_an_image_already_built_from_either_source_is_used_without_a_probe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As for the layers: an image built from the CPU index (or from PyPI) is the one a job uses, with
    the index unreachable and without asking it; with neither built and the index unreachable, PyPI's."""
    build = _build_module()
    closed = f"http://127.0.0.1:{simple_index.closed_port()}/simple"
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, closed)
    cpu = build.resolve("pytorch-2.13-gpu", torch_index=closed)
    pypi = build.resolve("pytorch-2.13-gpu", torch_index="pypi")
    for made in (cpu, pypi):
        monkeypatch.setattr(layers, "_PROBED", {})
        monkeypatch.setattr(layers, "probe", lambda *a, **k: pytest.fail("probed although an image is built"))
        built = {build.base_tag(build.suite(made)): "sha256:base"}
        built[build.image_tag(made, "sha256:base")] = "sha256:image"
        monkeypatch.setattr(build, "_image_id", built.get)
        assert build.resolve("pytorch-2.13-gpu").torch_index == made.torch_index
    monkeypatch.undo()
    monkeypatch.setenv(dlc.TORCH_INDEX_VAR, closed)
    monkeypatch.setattr(layers, "_PROBED", {})
    monkeypatch.setattr(build, "_image_id", lambda tag: None)
    assert build.resolve("pytorch-2.13-gpu").torch_index is None


def test_a_bad_torch_index_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _build_module().main(["--framework", "2.13", "--print-tag", "--torch-index", "ftp://example.com/simple"])
    assert "--torch-index" in str(info.value) and "'pypi'" in str(info.value)
