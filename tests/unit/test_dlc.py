"""What the emulator installs for each DLC image (emulator/job/dlc.py), against AWS's files.

Oracle: ``emulator/job/dlc_images.json``, read from aws/deep-learning-containers by
``tools/dlc_describe`` (its own tests check it against AWS's files and
``shared/reference/dlc-contents.md``), and the SageMaker SDK's ``image_uri_config`` for which
image a launcher gets. Nothing here installs anything.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.errors import RequestError
from emulator.inhost import ROOT as INHOST
from emulator.job import dlc, frameworks
from emulator.job.instance_types import lookup

IMAGES = sorted(dlc.images())


@pytest.mark.parametrize("image_id", IMAGES)
def test_every_package_of_the_image_is_installed_or_a_stated_gap(image_id: str) -> None:
    """Nothing AWS's files list is dropped silently: each package is in the install set (torch builds,
    the rest, or the toolkits at the family's pins) or named as not installable, with a reason."""
    image = dlc.image(image_id)
    install = frameworks.install_set(image)
    installed = {dlc.canonical_name(re.match(r"[A-Za-z0-9._-]+", r).group(0))  # type: ignore[union-attr]
                 for r in (*install.torch, *install.packages, *install.no_deps, *install.toolkits)}
    assert image.packages, image_id
    for pkg in image.packages:
        if pkg.name in install.gaps:
            assert install.gaps[pkg.name], pkg
            continue
        assert pkg.name in installed, (image_id, pkg)
    for name in ("sagemaker-training", "sagemaker-pytorch-training", "pip"):
        assert name in installed, (image_id, name)


@pytest.mark.parametrize("image_id", IMAGES)
def test_aws_pins_are_kept(image_id: str) -> None:
    """A version AWS pins is the version installed (torch builds: PyPI's build of the same release;
    the toolkits: the family's, AWS's own where AWS documents them)."""
    image = dlc.image(image_id)
    install = frameworks.install_set(image)
    wanted = {r.split("==")[0].split("[")[0]: r.split("==", 1)[1].lstrip("=")
              for r in (*install.torch, *install.packages, *install.no_deps, *install.toolkits) if "==" in r}
    toolkit = frameworks.family(image.family).toolkit
    assert image.packages, image_id
    for pkg in image.packages:
        if pkg.release is None or pkg.name in install.gaps:
            continue
        if pkg.name == "sagemaker-training":
            assert wanted[pkg.name] == toolkit[0]
        elif pkg.name == "sagemaker-pytorch-training":
            assert wanted[pkg.name] == toolkit[1]
        else:
            assert wanted[pkg.name] == pkg.release, (image_id, pkg)
    if image.locked:  # 2.11+: the whole lock is a constraint, so dependencies are AWS's too
        constraints = dict(c.split("==") for c in install.constraints if "==" in c)
        assert constraints["numpy"] == image.locked["numpy"]
        assert install.uploaded_prior_to == image.date


@pytest.mark.parametrize("family", [f.name for f in frameworks.FAMILIES])
def test_the_family_table_agrees_with_aws_on_torch_and_python(family: str) -> None:
    fam = frameworks.family(family)
    for gpu in (False, True):
        image = dlc.pytorch_image(family, gpu=gpu)
        assert image.framework_version == fam.torch, image.id
        assert f"py{''.join(image.python.split('.')[:2])}" in fam.dlc_py, image.id


def test_the_instance_type_picks_the_cpu_or_gpu_image() -> None:
    sel = frameworks.select("2.5.1", "py311")
    assert frameworks.image_of(sel, lookup("ml.c5.xlarge")).id == "pytorch-2.5-cpu"
    assert frameworks.image_of(sel, lookup("ml.p3.8xlarge")).id == "pytorch-2.5-gpu"
    # no DLC named: the default world, whatever the type
    assert frameworks.image_of(None, lookup("ml.g5.xlarge")).id == dlc.CURRENT_IMAGE
    assert frameworks.image_of(frameworks.select("current"), lookup("ml.m5.xlarge")).id == dlc.CURRENT_IMAGE


def test_huggingface_images_add_their_packages_to_their_pytorch_image() -> None:
    """aws/deep-learning-containers huggingface/pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu:
    FROM the PyTorch 2.5.1 GPU DLC, transformers 4.49.0, datasets 3.3.2, accelerate 1.4.0, ...."""
    hf = dlc.huggingface_image("4.49.0", field="transformers_version")
    assert hf.base == "pytorch-2.5-gpu" and hf.family == "2.5"
    names = {p.name for p in hf.packages}
    base = {p.name for p in dlc.image("pytorch-2.5-gpu").packages}
    assert {"torchvision", "pandas", "scikit-learn"} <= names and base - set(hf.uninstalled) <= names
    assert {p.name: p.release for p in hf.packages if p.name in ("transformers", "datasets", "accelerate")} == {
        "transformers": "4.49.0", "datasets": "3.3.2", "accelerate": "1.4.0"}
    assert hf.has_smddp  # its PyTorch 2.5 GPU image ships SMDDP


def test_smddp_is_where_aws_installs_it() -> None:
    """dlc-contents.md: SMDDP in the GPU images up to 2.5 (2.0's cu121 image excepted, see the
    generator's tests); in no CPU image and no GPU image from 2.6 on."""
    assert dlc.pytorch_image("2.5", gpu=True).has_smddp
    assert not dlc.pytorch_image("2.5", gpu=False).has_smddp
    assert not dlc.pytorch_image("2.6", gpu=True).has_smddp
    assert not dlc.pytorch_image("2.13", gpu=True).has_smddp


def test_what_cannot_install_here_is_named_with_its_module() -> None:
    gpu = dlc.pytorch_image("2.5", gpu=True)
    assert set(gpu.gaps) >= {"flash-attn", "transformer-engine", "smdistributed-dataparallel"}
    modules = gpu.gap_modules()
    assert "flash_attn" in modules and "CUDA-only" in modules["flash_attn"]
    assert "smdistributed" not in modules  # the in-host stand-in provides it there
    old = dlc.pytorch_image("1.12", gpu=True)
    assert "AWS's own build deepspeed 0.6.1" in old.gaps["deepspeed"]
    assert "sagemaker-debugger" in dlc.pytorch_image("1.13", gpu=False).gaps["smdebug"]
    checkout = dlc.Package("somepkg", "somepkg @ git+https://github.com/x/somepkg@1.0", None)
    assert "source checkout" in (dlc.not_installable(checkout) or "")


def test_a_torchtext_built_for_another_torch_is_the_emulators_gap() -> None:
    # pytorch/text README, "Installation": torchtext 0.18 goes with torch 2.3, its last release;
    # the 2.4-2.6 DLCs pin torchtext==0.18.0 beside torch 2.4-2.6 (their Dockerfiles).
    for family in ("2.4", "2.5", "2.6"):
        why = dlc.pytorch_image(family, gpu=False).gaps.get("torchtext", "")
        assert "built for torch 2.3" in why and "not known" in why, (family, why)
        assert "torchtext" in dlc.pytorch_image(family, gpu=False).gap_modules()
    assert "torchtext" not in dlc.pytorch_image("2.3", gpu=False).gaps  # unpinned: pip picks the matching one
    built_for = dlc.Package("torchtext", "torchtext==0.18.0+cpu", "0.18.0+cpu")
    assert dlc.not_installable(built_for, torch="2.3.0") is None


def test_torch_builds_come_from_pypi_or_the_index_named() -> None:
    image = dlc.pytorch_image("2.13", gpu=False)  # AWS: torch 2.13.0+cpu, torchvision 0.28.0+cpu, torchaudio 2.11.0+cpu
    assert dlc.torch_requirements(image) == ("torch===2.13.0", "torchvision===0.28.0", "torchaudio===2.11.0")
    assert dlc.torch_requirements(image, index="https://download.pytorch.org/whl/cpu") == (
        "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", "torchaudio==2.11.0+cpu")
    # the GPU image ships AWS's CUDA builds (+cu130); from a CPU index it gets the +cpu builds of the same releases
    gpu = dlc.pytorch_image("2.13", gpu=True)
    assert dlc.torch_requirements(gpu, index="https://download.pytorch.org/whl/cpu") == (
        "torch==2.13.0+cpu", "torchvision==0.28.0+cpu", "torchaudio==2.11.0+cpu")
    # 2.2: AWS pins torch==2.2.0 only; torchvision/torchaudio stay unpinned (torch's pin decides them)
    old = dlc.pytorch_image("2.2", gpu=True)
    assert dlc.torch_requirements(old, index="https://example.test/cpu") == ("torch==2.2.0+cpu", "torchvision",
                                                                            "torchaudio")


def test_the_torch_index_setting() -> None:
    """Unset or empty: PyTorch's CPU index (https://download.pytorch.org/whl/cpu, PyTorch's install
    instructions); ``pypi`` in any case: PyPI only; anything else: that index."""
    var = "SAGEMAKER_EMULATOR_TORCH_INDEX"
    assert dlc.torch_index_setting({}) == "https://download.pytorch.org/whl/cpu"
    assert dlc.torch_index_setting({var: ""}) == "https://download.pytorch.org/whl/cpu"
    assert dlc.torch_index_setting({var: "pypi"}) is None and dlc.torch_index_setting({var: " PyPI "}) is None
    assert dlc.torch_index_setting({var: "http://mirror.local/whl/cpu/"}) == "http://mirror.local/whl/cpu"


#: One module the 2.5 GPU DLC ships that the emulator cannot install (flash-attn), one no DLC ships,
#: one it ships whose loading there nobody knows (torchtext).
HINT_SCRIPT = """\
import json, os, sys
sys.path.insert(0, sys.argv[1])
from _sm_emulator_exits import missing_module_hint
for name in ("flash_attn", "sm_emulator_absent_pkg", "torchtext"):
    try:
        __import__(name)
    except ModuleNotFoundError as exc:
        print(json.dumps(missing_module_hint(exc)))
"""


def test_the_rank_hint_tells_the_dlc_gap_from_the_job_gap() -> None:
    """The in-host hint, as a rank prints it: a module of the DLC the emulator cannot provide is the
    emulator's gap (works on SageMaker); a module no DLC ships fails on SageMaker too."""
    image = dlc.pytorch_image("2.5", gpu=True)
    env = {**os.environ, "EMULATOR_DLC": image.label, "EMULATOR_DLC_GAPS": json.dumps(image.gap_modules())}
    done = subprocess.run([sys.executable, "-c", HINT_SCRIPT, str(INHOST / "site")], env=env,
                          capture_output=True, text=True, check=True)
    gap, missing, unknown = (json.loads(line) for line in done.stdout.splitlines())
    assert "the PyTorch 2.5.1 GPU DLC ships it" in gap and "emulator's gap" in gap and "CUDA-only" in gap
    assert "on SageMaker this import works" in gap
    assert "does not ship it" in missing and "On SageMaker this job fails here too" in missing
    assert "emulator's gap" in unknown and "whether it imports on SageMaker is not known" in unknown
    assert "this import works" not in unknown and "fails here too" not in unknown


def test_a_torch_index_that_is_not_a_url_is_refused_naming_the_variable() -> None:
    """A typo (no scheme) would otherwise be probed, fail, and mean PyPI without a word."""
    with pytest.raises(RequestError) as refused:
        dlc.torch_index_setting({dlc.TORCH_INDEX_VAR: "download.pytorch.org/whl/cpu"})
    assert refused.value.field == "SAGEMAKER_EMULATOR_TORCH_INDEX" and "pypi" in str(refused.value)
    assert dlc.torch_index_setting({dlc.TORCH_INDEX_VAR: "file:///srv/index/"}) == "file:///srv/index"


PKG_RESOURCES_SCRIPT = """\
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from _sm_emulator_exits import missing_module_hint
exc = ModuleNotFoundError("No module named 'pkg_resources'", name="pkg_resources")
print(json.dumps(missing_module_hint(exc)))
"""


@pytest.mark.parametrize(("setuptools", "removed"), [("83.0.0", True), ("80.9.0", False)])
def test_the_pkg_resources_hint_names_setuptools_and_never_blames_the_job(tmp_path: Path, setuptools: str,
                                                                          removed: bool) -> None:
    """``pkg_resources`` is setuptools' module; setuptools 82.0.0 removed it (setuptools' NEWS.rst,
    "v82.0.0 ... pkg_resources has been removed"). AWS's 2.8 Dockerfile installs ``setuptools>=75.0.0``
    unpinned, so whether the image SageMaker runs has it is not known: the hint says so, names this
    job's setuptools and the requirements.txt line that gives it back, and never says the job fails there."""
    info = tmp_path / f"setuptools-{setuptools}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: setuptools\nVersion: {setuptools}\n")
    env = {**os.environ, "EMULATOR_DLC": "the PyTorch 2.8.0 GPU DLC"}
    done = subprocess.run([sys.executable, "-c", PKG_RESOURCES_SCRIPT, str(tmp_path), str(INHOST / "site")],
                          env=env, capture_output=True, text=True, check=True)
    hint = json.loads(done.stdout)
    assert f"this job's setuptools is {setuptools}" in hint and "'setuptools<82'" in hint
    assert "is not known" in hint and "fails here too" not in hint and "does not ship" not in hint
    assert ("removed pkg_resources" in hint) is removed


def test_a_huggingface_layer_installs_in_awss_order_one_resolution_per_pip_command() -> None:
    """AWS's huggingface/pytorch/training/docker/2.8/py3/cu129/Dockerfile.gpu (f06ada0e08) is built
    FROM the PyTorch 2.8.0 GPU image and runs, in this order: ``pip install`` of the Hugging Face
    libraries (huggingface_hub, transformers, datasets, ...); ``pip install dill==0.3.8
    multiprocess==0.70.16``; ``pip install pathos==0.3.3 --no-deps``; ``pip install --upgrade pip``;
    ``pip uninstall -y sigopt``, ``pip uninstall -y ray pyctcdecode``; ``pip install -U pyarrow ...
    "s3fs==2025.9.0" ... "urllib3>=2.5.0"``. One resolution of all of it with the base's boto3
    stopped pip with resolution-too-deep (s3fs's aiobotocore needs an older botocore), which AWS's
    last command simply installs."""
    hf = dlc.huggingface_versions()["4.56.2"]
    install = frameworks.install_set(hf)
    base = frameworks.install_set(dlc.image("pytorch-2.8-gpu"))
    # the base's set as of the Hugging Face image's date, the earlier of the two
    assert hf.date is not None and base.uploaded_prior_to is not None and hf.date < base.uploaded_prior_to
    assert install.steps[0] == dlc.InstallStep(base.packages, False, hf.date)
    own = install.steps[1:]
    names = [{re.split(r"[<>=\[]", r)[0] for r in step.packages} for step in own]
    libs = names.index({"huggingface-hub", "transformers", "datasets", "diffusers", "jinja2", "tensorboard",
                        "bitsandbytes", "kernels", "evaluate", "accelerate", "ninja", "trl", "peft"})
    assert names[libs + 1:] == [{"dill", "multiprocess"}, {"pathos"}, {"pip"},
                                {"pyarrow", "cryptography", "pyopenssl", "pillow", "wheel", "setuptools", "s3fs",
                                 "werkzeug", "filelock", "numpy", "shap", "urllib3"}]
    assert [s.no_deps for s in own[libs:]] == [False, False, True, False, False]
    assert "s3fs==2025.9.0" in own[-1].packages and all(s.uploaded_prior_to == hf.date for s in own)
    assert set(install.uninstall) == {"sigopt", "ray", "pyctcdecode"}
    # a PyTorch image has no steps: its layer's key, and so the layers already made, stay as they were
    assert base.steps == () and base.uninstall == ()
    assert "\0steps" not in base.key_material() and "\0steps" in install.key_material()
