"""The framework table (emulator/job/frameworks.py), checked against the SageMaker SDK's own table.

Oracle: SDK v2 ``image_uri_config/pytorch.json`` (which versions and ``py_version`` values each
PyTorch training DLC had, and the ``version_aliases``) and ``sagemaker.image_uris.retrieve``
(the DLC URI the SDK builds from ``framework_version``/``py_version``). Versions after the
SDK's table (2.9 to 2.13) come from aws/deep-learning-containers ``docs/src/data`` (cited in the
module docstring); their tags are written here as that page lists them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import emulator
from emulator.errors import RequestError
from emulator.job import dlc, frameworks

image_uris = pytest.importorskip("sagemaker.image_uris")

SDK = image_uris.config_for_framework("pytorch")["training"]
#: SDK versions the emulator covers (1.12 and later) and those it refuses (no wheel).
COVERED = [v for v in SDK["versions"] if tuple(map(int, v.split(".")[:2])) >= (1, 12)]
REFUSED = [v for v in SDK["versions"] if v not in COVERED]


@pytest.mark.parametrize("version", COVERED)
def test_every_sdk_version_maps_to_its_py_versions(version: str) -> None:
    allowed = SDK["versions"][version]["py_versions"]
    assert allowed, version
    for py in allowed:
        sel = frameworks.select(version, py)
        assert sel is not None and sel.family is not None
        assert sel.dlc_version == version
        assert version in sel.family.dlc_versions
    with pytest.raises(RequestError) as err:
        frameworks.select(version, "py37")
    assert err.value.field == "py_version"
    assert err.value.allowed == ", ".join(allowed)


@pytest.mark.parametrize(("alias", "full"), [(a, f) for a, f in SDK["version_aliases"].items()
                                            if f in COVERED])
def test_sdk_aliases_mean_the_same_release(alias: str, full: str) -> None:
    sel = frameworks.select(alias)
    assert sel is not None and sel.family is not None
    assert sel.family.default_version == full
    assert sel.dlc_version == full


@pytest.mark.parametrize("version", REFUSED)
def test_older_dlcs_are_refused_naming_the_allowed_versions(version: str) -> None:
    with pytest.raises(RequestError) as err:
        frameworks.select(version)
    assert err.value.field == "framework_version"
    assert "no CPU-runnable torch wheel" in str(err.value)
    assert "1.12.1" in (err.value.allowed or "") and "current" in (err.value.allowed or "")


def test_unknown_version_is_refused() -> None:
    with pytest.raises(RequestError) as err:
        frameworks.select("9.9")
    assert err.value.field == "framework_version"
    assert "unknown PyTorch framework version '9.9'" in str(err.value)
    assert "2.13.0" in str(err.value)


@pytest.mark.parametrize("version", COVERED)
@pytest.mark.parametrize("instance_type", ["ml.p4d.24xlarge", "ml.c5.xlarge"])
def test_sdk_image_uris_parse_back(version: str, instance_type: str) -> None:
    py = SDK["versions"][version]["py_versions"][-1]
    uri = image_uris.retrieve("pytorch", region="us-west-2", version=version, py_version=py,
                              instance_type=instance_type, image_scope="training")
    assert frameworks.parse_dlc_image(uri) == (version, py, None)
    sel = frameworks.select(image_uri=uri)
    assert sel is not None and sel.source == "image_uri" and sel.dlc_version == version


# Tags as aws/deep-learning-containers docs/src/data/*/<version>-*-sagemaker.yml list them.
DOC_TAGS = [
    ("pytorch-training:2.2.0-gpu-py310-cu121-ubuntu20.04-sagemaker", "2.2.0", "py310"),
    ("pytorch-training:1.12-gpu-py38-cu113-ubuntu20.04-sagemaker-v1.5", "1.12", "py38"),
    ("pytorch-training:2.10.0-cpu-py313-ubuntu22.04-sagemaker", "2.10.0", "py313"),
    ("pytorch-training:2.9-cpu-py312", "2.9", "py312"),
    ("pytorch:2.13.0-cpu-amzn2023-sagemaker", "2.13.0", None),
    ("pytorch:2.12-cu130-amzn2023-sagemaker", "2.12", None),
]


@pytest.mark.parametrize(("repo_tag", "version", "py"), DOC_TAGS)
def test_documented_dlc_tags(repo_tag: str, version: str, py: str | None) -> None:
    for registry in ("763104351884.dkr.ecr.eu-west-1.amazonaws.com",
                     "public.ecr.aws/deep-learning-containers"):
        uri = f"{registry}/{repo_tag}"
        assert frameworks.parse_dlc_image(uri) == (version, py, None)
        sel = frameworks.select(image_uri=uri)
        assert sel is not None and sel.family is not None
        assert sel.py_version in sel.family.dlc_py


def test_images_that_are_not_pytorch_dlcs() -> None:
    assert frameworks.parse_dlc_image("my-registry.local/train:1.12.1") is None
    assert frameworks.select(image_uri="ubuntu:22.04") is None
    digest = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training@sha256:" + "a" * 64
    assert frameworks.select(image_uri=digest) is None  # no version to go by: today's image
    with pytest.raises(RequestError) as err:
        frameworks.select(image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/"
                                    "tensorflow-training:2.13.0-cpu-py310")
    assert err.value.field == "AlgorithmSpecification.TrainingImage"
    assert "tensorflow-training images are not emulated" in str(err.value)


def test_framework_version_wins_over_the_image_tag() -> None:
    sel = frameworks.select("1.13", image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/"
                                               "pytorch-training:2.0.1-cpu-py310")
    assert sel is not None and sel.family is not None and sel.family.name == "1.13"


def test_nothing_asked_and_current() -> None:
    assert frameworks.select() is None
    current = frameworks.select("current")
    assert current is not None and current.family is None and current.source == "current"
    assert frameworks.process_refusal(current, (3, 11)) is None
    with pytest.raises(RequestError) as err:
        frameworks.select(py_version="py38")
    assert err.value.field == "py_version"


def test_the_issue_example_and_its_deviations() -> None:
    # The seeds' launchers: framework_version="1.12.1", py_version="py38".
    sel = frameworks.select("1.12.1", "py38")
    assert sel is not None and sel.family is not None
    assert (sel.family.torch, sel.family.python, sel.family.suite) == ("1.12.1", "3.9", "bullseye")
    text = " | ".join(sel.deviations)
    assert "Python 3.9 runs instead of the DLC's 3.8" in text
    assert "sagemaker-training 5.1.4 / sagemaker-pytorch-training 3.0.0" in text
    fields = sel.emulator_fields()
    assert fields["Torch"] == "1.12.1" and fields["Python"] == "3.9"
    assert fields["FrameworkVersion"] == "1.12.1" and fields["PyVersion"] == "py38"
    older = frameworks.select("1.12.0")
    assert older is not None and any("instead of the DLC's 1.12.0" in d for d in older.deviations)


def test_documented_toolkits_are_used_where_aws_lists_them() -> None:
    # aws/deep-learning-containers docker/pytorch/2.13/cpu/uv.lock: sagemaker-training 5.1.1,
    # sagemaker-pytorch-training 3.0.0.
    sel = frameworks.select("2.13")
    assert sel is not None and sel.family is not None
    assert sel.family.toolkit == ("5.1.1", "3.0.0")
    assert not any("sagemaker-training" in d for d in sel.deviations)


# PyPI's torch 1.12.1 files are cp37..cp310; 1.13.1 has cp311 (checked with
# `pip install --dry-run --python-version 3.11 torch==1.13.1`).
def test_process_backend_refusal_names_both_versions_and_docker() -> None:
    sel = frameworks.select("1.12.1", "py38")
    text = frameworks.process_refusal(sel, (3, 11))
    assert text is not None
    assert "torch 1.12.1" in text and "Python 3.11" in text and "--backend docker" in text
    assert frameworks.process_refusal(sel, (3, 9), allow_untested=True) is None
    assert frameworks.process_refusal(frameworks.select("1.13"), (3, 11), allow_untested=True) is None


def test_process_backend_refuses_a_family_without_a_smoke_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A family tests/jobs/test_families.py does not run is refused before any host starts, naming the
    tested families and the opt-in; a tested one is not."""
    monkeypatch.delenv("SAGEMAKER_EMULATOR_FRAMEWORK_VERSION", raising=False)  # the suite's "current"
    monkeypatch.delenv(frameworks.UNTESTED_VAR, raising=False)
    assert frameworks.process_refusal(frameworks.select("2.2.0"), (3, 11)) is None
    text = frameworks.process_refusal(frameworks.select("2.6.0"), (3, 11))
    assert text is not None and "2.6" in text and frameworks.UNTESTED_VAR in text
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('never')\n")
    out = tmp_path / "out"
    with pytest.raises(RequestError) as info:
        emulator.run(entry_point="train.py", source_dir=src, instance_count=2, instance_type="ml.g5.xlarge",
                     framework_version="2.6.0", py_version="py312", backend="process", output_path=out,
                     job_name="untested-family", echo=False)
    assert "framework_version" in str(info.value) and frameworks.UNTESTED_VAR in str(info.value)
    assert not (out / "untested-family").exists()


def test_every_family_has_a_debian_python_and_a_tag_name() -> None:
    assert frameworks.FAMILIES
    for fam in frameworks.FAMILIES:
        assert fam.suite in ("bullseye", "bookworm", "trixie")
        assert re.fullmatch(r"torch\d+\.\d+", fam.tag_name)
        assert fam.runs_on(tuple(map(int, fam.python.split("."))))  # type: ignore[arg-type]
        assert [r["family"] for r in frameworks.table([fam])] == [fam.name]


#: Python versions with a release of thinc 8.3.4 on PyPI: its metadata says
#: ``Requires-Python: <3.13,>=3.9`` (https://pypi.org/project/thinc/8.3.4/; ``pip download
#: thinc==8.3.4 --python-version 3.13`` finds none, 3.11 finds a cp311 wheel).
THINC_834_PYTHONS = ("3.9", "3.10", "3.11", "3.12")


def test_a_family_pinning_thinc_834_runs_a_python_thinc_has_a_release_for() -> None:
    pinned = {im.family for im in dlc.images().values() if any(p.requirement == "thinc==8.3.4" for p in im.packages)}
    assert pinned == {"2.6", "2.7", "2.8", "2.9"}  # AWS's 2.6 to 2.9 Dockerfiles (dlc_images.json)
    for name in pinned:
        fam = frameworks.family(name)
        assert fam.python in THINC_834_PYTHONS, name
        assert fam.python_why and "thinc==8.3.4" in fam.python_why
        lines = frameworks.select(name).deviations  # type: ignore[union-attr]
        assert any(f"Python {fam.python} runs instead of the DLC's 3.12" in x and "thinc" in x
                   for x in lines), lines


HF = image_uris.config_for_framework("huggingface")["training"]
#: The SDK's Hugging Face training versions on a PyTorch the emulator covers (1.12 and later).
HF_COVERED = [(v, k[len("pytorch"):]) for v, c in HF["versions"].items() for k in c
              if k.startswith("pytorch") and tuple(map(int, k[len("pytorch"):].split(".")[:2])) >= (1, 12)]


@pytest.mark.parametrize(("transformers", "torch"), HF_COVERED)
def test_sdk_huggingface_image_uris_parse_back(transformers: str, torch: str) -> None:
    """The SDK's own URI for a ``HuggingFace`` estimator (``image_uris.retrieve("huggingface", …)``)
    selects that Hugging Face image: its torch family, its transformers release, GPU."""
    from emulator.job.instance_types import lookup

    uri = image_uris.retrieve("huggingface", region="us-west-2", version=transformers,
                              base_framework_version=f"pytorch{torch}", instance_type="ml.g5.12xlarge",
                              image_scope="training")
    version, _, parsed_transformers = frameworks.parse_dlc_image(uri) or (None, None, None)
    assert (version, parsed_transformers) == (torch, transformers)
    sel = frameworks.select(image_uri=uri)
    assert sel is not None and sel.family is not None and sel.transformers_version == transformers
    image = sel.image(lookup("ml.g5.12xlarge"))
    assert image.flavour == "huggingface" and image.transformers_version == transformers
    assert image.framework_version == torch and image.device == "gpu"


def test_an_unknown_huggingface_tag_is_refused_with_the_known_ones() -> None:
    uri = ("763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-training:"
           "2.5.1-transformers4.99.0-gpu-py311-cu124-ubuntu22.04")
    with pytest.raises(RequestError) as err:
        frameworks.select(image_uri=uri)
    assert err.value.field == "AlgorithmSpecification.TrainingImage"
    assert "4.99.0" in str(err.value) and "4.49.0 (PyTorch 2.5.1)" in (err.value.allowed or "")
    mismatched = uri.replace("4.99.0", "4.49.0").replace("2.5.1-", "2.8.0-")
    with pytest.raises(RequestError) as err:
        frameworks.select(image_uri=mismatched)
    assert "built on PyTorch 2.5.1, not 2.8.0" in str(err.value)
