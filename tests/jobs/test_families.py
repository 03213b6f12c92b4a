"""Framework families on the process backend: a 2-host smoke test per family.

Each family the process backend accepts for this interpreter installs its DLC's torch into a job
environment (the PyPI wheel, a CUDA build, with its ``nvidia-*`` wheels: about 3 GB to download
and 5 GB on disk per family). So these tests are marked ``families`` and left out of
``nox -s tests``; ``nox -s families`` runs them (``.ci/run`` calls it last). By default they run
:data:`SMOKE` (the families the tests must cover); ``EMULATOR_TEST_FAMILIES=all`` (or a
comma-separated list of family names) selects others.

Oracle: what the ranks report from inside the hosts (``torch.__version__`` against the torch
release AWS's DLC of the family ships, cited in emulator/job/frameworks.py; the all-reduced sum of
``rank + 1``), DDP's own promise that every rank holds the same parameters after a step, and the
DLC's package list (emulator/job/dlc_images.json, read from AWS's files): every top-level module of
every package of it that installs here imports in the job.

The Hugging Face DLCs (transformers 4.49.0 on PyTorch 2.5.1, 4.56.2 on 2.8.0) run ``transformers.Trainer`` on a
``datasets`` dataset, 2 hosts x 4 GPUs, on both backends; the toolkit-style MNIST script
(tests/scripts_dlc) runs on the 2.5.1 DLC on both backends.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import emulator
from emulator.job import dlc, frameworks
from emulator.job.instance_types import lookup

from ..rank_output import marked_json
from .test_dlc_jobs import SCRIPTS, mnist_data, mnist_reports

#: The families whose smoke test always runs in ``nox -s families`` (the process backend refuses
#: every other family unless ``SAGEMAKER_EMULATOR_UNTESTED_FAMILIES=1``; 2.13 is this machine's
#: torch, which the whole suite runs).
SMOKE = ("2.0", "2.2", "2.5", "2.8")


def test_every_family_the_process_backend_accepts_has_a_smoke_test() -> None:
    assert set(frameworks.SMOKE_TESTED) == {*SMOKE, "2.13"}
SELECT_VAR = "EMULATOR_TEST_FAMILIES"

#: Every top-level module (read from each distribution's RECORD) of the distributions named in
#: SMOKE_DISTRIBUTIONS imports; the ones that do not are reported. ``pip`` is imported last: on
#: Python before 3.12, importing pip turns setuptools' distutils shim off for the rest of the
#: process (setuptools' ``_distutils_hack.DistutilsMetaFinder.spec_for_pip``, pypa/pip#8761), and a
#: later ``import setuptools`` (or triton, which imports it) then fails its own check with an
#: AssertionError, in the DLC as here: an artefact of importing everything in one process.
IMPORTS = """\
import importlib, json, os, traceback
from importlib import metadata
failed = {}
for name in sorted(os.environ["SMOKE_DISTRIBUTIONS"].split(","), key=lambda n: n == "pip"):
    try:
        files = metadata.distribution(name).files or []
    except metadata.PackageNotFoundError:
        failed[name] = "not installed"
        continue
    tops = {f.parts[0][:-3] if f.parts[0].endswith(".py") else f.parts[0] for f in files
            if f.parts and (len(f.parts) > 1 or f.parts[0].endswith(".py")) and f.parts[0] not in ("..", "__pycache__")
            and not f.parts[0].endswith((".dist-info", ".egg-info", ".data")) and
            (f.parts[0].endswith(".py") or f.parts[0].isidentifier())}
    for top in sorted(tops):
        try:
            importlib.import_module(top)
        except BaseException as exc:  # noqa: BLE001 - reported
            failed[f"{name}:{top}"] = f"{type(exc).__name__}: {exc}"[:300]
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
print("IMPORTS " + json.dumps({"rank": os.environ.get("RANK"), "failed": failed,
      "versions": {n: version(n) for n in ("setuptools", "aiohttp")}}), flush=True)
"""
#: DDP on the host's emulated GPU: .cuda(), DDP(device_ids=[local_rank]), an Adam step (torch 2.2's
#: Optimizer asks torch.cuda.is_current_stream_capturing() once CUDA is available), all_reduce.
SCRIPT = IMPORTS + """\
import json, os, sys, torch
import torch.distributed as dist
dist.init_process_group("nccl")
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
torch.manual_seed(dist.get_rank())  # different initial weights: DDP broadcasts rank 0's
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).cuda(), device_ids=[local])
opt = torch.optim.Adam(model.parameters(), lr=0.1)
for _ in range(3):
    x = torch.randn(8, 4).cuda()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
t = torch.tensor([float(dist.get_rank() + 1)]).cuda()
dist.all_reduce(t)
print("SMOKE " + json.dumps({"torch": torch.__version__, "python": sys.version.split()[0],
      "rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(),
      "params": [p.detach().cpu().flatten().tolist() for p in model.parameters()]}), flush=True)
dist.destroy_process_group()
"""


def _accepted() -> list[frameworks.Family]:
    """The families this interpreter's process backend runs (with the opt-in: also untested ones)."""
    here = sys.version_info[:2]
    return [f for f in frameworks.FAMILIES if f.runs_on(here)]


def _selected() -> list[str]:
    choice = os.environ.get(SELECT_VAR, "")
    if choice == "all":
        return [f.name for f in _accepted()]
    return [n.strip() for n in choice.split(",") if n.strip()] or list(SMOKE)


def _params() -> list[object]:
    accepted = {f.name for f in _accepted()}
    return [pytest.param(name, id=name, marks=pytest.mark.skipif(
        name not in accepted, reason=f"the process backend refuses {name} with Python "
                                     f"{sys.version_info[0]}.{sys.version_info[1]} (no torch wheel)"))
            for name in _selected()]


@pytest.mark.families
@pytest.mark.parametrize("name", _params())
def test_family_runs_two_hosts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", raising=False)  # the suite's "current"
    if name not in SMOKE:
        monkeypatch.setenv(frameworks.UNTESTED_VAR, "1")
    family = frameworks.family(name)
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(SCRIPT)
    image = dlc.pytorch_image(family.name, gpu=True)
    listed = sorted({p.name for p in image.packages} - set(image.gaps))
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.xlarge",
                          framework_version=family.default_version, py_version=family.dlc_py[-1],
                          distribution={"torch_distributed": {"enabled": True}}, output_path=tmp_path / "out",
                          job_name=f"family-{name.replace('.', '-')}", echo=False, stop_grace=2,
                          environment={"SMOKE_DISTRIBUTIONS": ",".join(listed)})
    assert result.status == "Completed", (result.failure_reason, result.log("algo-1")[-3000:])
    reports = [r for host in ("algo-1", "algo-2") for r in marked_json(result.log(host), "SMOKE ")]
    assert sorted(r["rank"] for r in reports) == [0, 1], reports
    for r in reports:
        assert r["torch"].split("+")[0] == family.torch
        assert r["world"] == 2 and r["sum"] == 3.0
    assert reports[0]["params"] == reports[1]["params"]  # DDP kept the replicas in step
    imports = [r for host in ("algo-1", "algo-2") for r in marked_json(result.log(host), "IMPORTS ")]
    assert len(imports) == 2, imports
    for r in imports:
        expected = expected_import_failures(image, r["versions"])
        assert set(r["failed"]) == set(expected), r
        assert all(expected[k] in r["failed"][k] for k in expected), r


def expected_import_failures(image: dlc.Image, versions: dict[str, str | None]) -> dict[str, str]:
    """The imports of the image's list that fail here for a reason that holds in a DLC built on the
    image's date (with a part of the error), each reason read from AWS's Dockerfile and the packages'
    own files, not from this run:

    - ``smexperiments`` (sagemaker-experiments 0.1.45's ``smexperiments/__init__.py`` imports
      ``pkg_resources``) where the job's setuptools is 82 or later: setuptools' NEWS.rst, v82.0.0,
      "pkg_resources has been removed". AWS's Dockerfiles install setuptools with a lower bound only
      (2.8: ``setuptools>=75.0.0``), and the layer resolves it as of the image's date (2026-07-16 for
      2.8: setuptools 83), as a build of that day did;
    - ``blackd``, black's optional HTTP server: it imports aiohttp, which only the ``black[d]`` extra
      requires (black's pyproject.toml); AWS installs plain ``black`` (2.8: ``black>=26.3.1``), and
      nothing else in the image's list brings aiohttp."""
    out = {}
    setuptools = versions.get("setuptools")
    if image.package("sagemaker-experiments") and setuptools and int(setuptools.split(".")[0]) >= 82:
        out["sagemaker-experiments:smexperiments"] = "No module named 'pkg_resources'"
    black = image.package("black")
    if black and "[d" not in black.requirement.replace(" ", "") and versions.get("aiohttp") is None:
        out["black:blackd"] = "No module named 'aiohttp'"
    return out


#: (transformers, the SDK's base_framework_version, py_version, the datasets AWS installs): AWS's
#: huggingface/pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu and 2.8/py3/cu129/Dockerfile.gpu
#: (aws/deep-learning-containers f06ada0e08) pin datasets 3.3.2 and 4.1.0.
HF_CASES = [("4.49.0", "pytorch2.5.1", "py311", "3.3.2"), ("4.56.2", "pytorch2.8.0", "py312", "4.1.0")]


@pytest.mark.families
@pytest.mark.parametrize(("transformers", "base", "py", "datasets"), HF_CASES, ids=[c[0] for c in HF_CASES])
@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_huggingface_trainer_runs_on_its_dlc(backend: str, transformers: str, base: str, py: str, datasets: str,
                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            request: pytest.FixtureRequest) -> None:
    """An unchanged SDK v2 ``HuggingFace`` launcher's request (the SDK's own image URI for the
    transformers / PyTorch / Python versions), 2 x ml.g5.12xlarge, ``torch_distributed``: the Hugging
    Face DLC's transformers and datasets import, Trainer trains on world 8."""
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    monkeypatch.delenv("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", raising=False)
    from sagemaker import image_uris

    uri = image_uris.retrieve("huggingface", region="us-west-2", version=transformers,
                              base_framework_version=base, py_version=py,
                              instance_type="ml.g5.12xlarge", image_scope="training")
    result = emulator.run(entry_point="hf_trainer.py", source_dir=SCRIPTS, instance_count=2,
                          instance_type="ml.g5.12xlarge", image_uri=uri,
                          distribution={"torch_distributed": {"enabled": True}}, output_path=tmp_path / "out",
                          job_name=f"hf-{transformers.replace('.', '-')}-{backend}", echo=False, stop_grace=2,
                          backend=backend)
    assert result.status == "Completed", (result.failure_reason, result.log("algo-1")[-4000:])
    reports = [r for host in ("algo-1", "algo-2") for r in marked_json(result.log(host), "HF ")]
    assert sorted(r["rank"] for r in reports) == list(range(8)), reports
    for r in reports:
        assert r["world"] == 8 and r["steps"] == 2 and r["transformers"] == transformers
        assert r["datasets"] == datasets and r["device"].startswith("cuda")
    framework = json.loads((result.job_dir / "job.json").read_text())["Emulator"]["Framework"]
    torch_family = base.removeprefix("pytorch").rsplit(".", 1)[0]
    assert framework["Image"]["Id"] == f"huggingface-{transformers}-pytorch-{torch_family}-gpu"
    assert not [w for w in result.warnings if "transformers" in w or "datasets" in w], result.warnings


@pytest.mark.families
@pytest.mark.parametrize("backend", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_toolkit_style_mnist_on_the_2_5_dlc(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           request: pytest.FixtureRequest) -> None:
    """The toolkit-style MNIST job (torchvision) with framework_version 2.5.1 on ml.c5.xlarge: the 2.5
    CPU DLC's torchvision 0.20.1 (AWS: torchvision-0.20.1+cpu)."""
    if backend == "docker":
        request.getfixturevalue("docker_ready")
    monkeypatch.delenv("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", raising=False)
    assert frameworks.image_of(frameworks.select("2.5.1"), lookup("ml.c5.xlarge")).id == "pytorch-2.5-cpu"
    result = emulator.run(entry_point="mnist_toolkit.py", source_dir=SCRIPTS, instance_count=2,
                          instance_type="ml.c5.xlarge", framework_version="2.5.1", py_version="py311",
                          hyperparameters={"backend": "gloo"}, channels={"training": mnist_data(tmp_path / "data")},
                          output_path=tmp_path / "out", job_name=f"mnist-2-5-{backend}", echo=False, backend=backend)
    reports = mnist_reports(result)
    assert all(str(r["torchvision"]).startswith("0.20.1") for r in reports), reports
