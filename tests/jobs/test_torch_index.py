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
