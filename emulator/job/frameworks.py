"""The framework table: which torch and Python a job runs with, from its ``framework_version``,
``py_version`` or DLC ``image_uri``, and what the emulator installs for it.

On SageMaker the launcher's ``framework_version``/``py_version`` (or an explicit ``image_uri``)
chooses an AWS Deep Learning Container (DLC), and with it the torch, the Python and the
``sagemaker-training``/``sagemaker-pytorch-training`` toolkits the script runs with. Here every
DLC *family* (one torch minor version) maps to an image the emulator builds on demand
(``docker/build.py --framework 1.12``) from wheels on PyPI that run on the CPU.

What is emulated: the torch release (the family's newest patch release the DLC shipped), a
Python of the same minor version where Debian has it, the toolkit versions the DLC shipped where
AWS documents them. What is not, and is recorded as a deviation per job (:attr:`Selection.deviations`):

- Python: the images use Debian's ``python3`` (bullseye 3.9, bookworm 3.11, trixie 3.13). A DLC
  Python Debian lacks runs on the next newer one (py38 -> 3.9, py310 -> 3.11, py312 -> 3.13),
  so syntax and standard library the script was written for are there, except where a family
  says why not (:attr:`Family.python_why`): the 2.6 to 2.9 families' py312 runs on 3.11 because
  their DLC files pin ``thinc==8.3.4``, which has no release for 3.13; the torch 2.13 family
  uses 3.11 because the only CPU build of torch 2.13 this machine has is for CPython 3.11.
- torch: PyPI's x86_64 wheels are CUDA builds (1.12: CUDA libraries inside the wheel; 1.13 and
  2.x: ``nvidia-*`` wheels as dependencies, which ``import torch`` loads, so they are installed);
  they run on the CPU. The DLC's own builds (``+cpu``, or CUDA with AWS patches) are not on PyPI.
  The process backend's framework layer takes the ``+cpu`` builds from the PyTorch CPU index where
  it is reachable when the layer is made (:func:`emulator.backends.layers.torch_source`); the job's
  ``job.json`` says which it holds (``TorchBuild``, :func:`record`).
  An older patch release (``framework_version="1.12.0"``) runs with the family's (1.12.1).
- Toolkits: where the DLC's exact ``sagemaker-training`` / ``sagemaker-pytorch-training`` is not
  documented (1.12 to 2.10: the DLC Dockerfiles only give ranges such as
  ``"sagemaker-pytorch-training<3"``), the emulator's pins (:data:`PINNED_TOOLKIT`) are used.
- The DLC's other packages: :mod:`emulator.job.dlc` (read from AWS's build files; installed
  into the process backend's framework layers and the docker backend's images).

Sources (read 2026-11):

- DLC versions and Python per version: SageMaker Python SDK v2.257.6
  ``src/sagemaker/image_uri_config/pytorch.json`` (``training``: versions 1.12.0 to 2.8.0,
  ``version_aliases`` such as ``"1.12": "1.12.1"``); aws/deep-learning-containers
  ``docs/src/data/pytorch-training/{2.9,2.10}-*-sagemaker.yml`` (py312, py313) and
  ``docs/src/data/pytorch/{2.11,2.12,2.13}-*-sagemaker.yml`` (py312, tags such as
  ``2.13.0-cpu-amzn2023-sagemaker`` without a Python, repository ``pytorch``).
- Toolkit versions: aws/deep-learning-containers ``docker/pytorch/{2.11,2.12,2.13}/cpu/uv.lock``
  (commit e0ecedea6a): ``sagemaker-training`` 5.1.1 and ``sagemaker-pytorch-training`` 3.0.0.
  ``pytorch/training/docker/1.12/py3/Dockerfile.cpu``: Python 3.8.13 and
  ``"sagemaker-pytorch-training<3"`` (no exact version).
- Python versions each torch release has wheels for: pytorch/pytorch ``RELEASE.md`` (release
  compatibility matrix), checked with ``pip install --dry-run --python-version`` for 1.12.1
  (no cp311), 1.13.1 (cp311), 2.0.1 (cp38), 2.13.0 (cp310, cp314).
- Which nvidia wheels ``import torch`` needs: measured; torch 2.1.2 installed with ``--no-deps``
  fails with ``ValueError: libcublas.so.*[0-9] not found in the system path``, and its
  ``libtorch_global_deps.so`` links cufft, curand, cublas, cudart and nvToolsExt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import RequestError
from . import dlc
from .instance_types import InstanceType

#: ``framework_version="current"``: this machine's torch (process) / the default image (docker).
CURRENT = "current"
#: The toolkits the emulator pins where the DLC's are not documented.
PINNED_TOOLKIT = ("5.1.4", "3.0.0")
#: The Python and Debian suite of the default image (``sagemaker-emulator:latest``).
DEFAULT_PYTHON = "3.11"
#: Debian suites by the Python they ship as ``python3``.
DEBIAN_SUITES = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
#: Request field names, as the SDK spells them (errors name them).
FIELD_VERSION = "framework_version"
FIELD_PY = "py_version"
FIELD_IMAGE = "AlgorithmSpecification.TrainingImage"
#: PyTorch DLC versions that exist (SDK pytorch.json) but have no CPU-runnable wheel here.
NO_WHEEL = ("0.4.0", "1.0.0", "1.1.0", "1.2.0", "1.3.1", "1.4.0", "1.5.0", "1.6.0", "1.7.1",
            "1.8.0", "1.8.1", "1.9.0", "1.9.1", "1.10.0", "1.10.2", "1.11.0")


@dataclass(frozen=True)
class Family:
    """One DLC family (a torch minor version) and what its emulator image holds."""

    name: str  #: "1.12"
    dlc_versions: tuple[str, ...]  #: full versions the DLC shipped, oldest first
    dlc_py: tuple[str, ...]  #: the DLC's ``py_version`` values
    torch: str  #: the torch release installed
    python: str  #: the image's Python (Debian's python3)
    wheel_pythons: tuple[str, str]  #: oldest and newest CPython the torch release has wheels for
    toolkit: tuple[str, str] = PINNED_TOOLKIT  #: sagemaker-training, sagemaker-pytorch-training
    toolkit_source: str | None = None  #: where AWS documents the DLC's toolkits (None: pinned)
    #: Extra pins the family needs (e.g. numpy 1.x for torch built against it).
    constraints: tuple[str, ...] = ()
    #: The pytorch-lightning release the emulator tests this family with. No PyTorch DLC ships
    #: Lightning: jobs install it through requirements.txt, as on SageMaker.
    lightning: str | None = None
    #: Why :attr:`python` is not the next newer Debian Python than the DLC's (None: it is).
    python_why: str | None = None

    @property
    def suite(self) -> str:
        """The Debian suite of the image."""
        return DEBIAN_SUITES[self.python]

    @property
    def tag_name(self) -> str:
        """The image tag's prefix: ``torch1.12`` (full tag ``sagemaker-emulator:torch1.12-<hash>``)."""
        return f"torch{self.name}"

    @property
    def default_version(self) -> str:
        """The full version ``framework_version="<family>"`` means (the SDK's alias)."""
        return self.dlc_versions[-1]

    def runs_on(self, python: tuple[int, int]) -> bool:
        """Whether the torch release has a wheel for CPython ``python`` (major, minor)."""
        low, high = (_minor(v) for v in self.wheel_pythons)
        return low <= python <= high


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


_LOCKED = "aws/deep-learning-containers docker/pytorch/{v}/cpu/uv.lock"
#: pip 24.1 refuses the legacy metadata of 2022-era wheels (pytorch-lightning 1.6.3 declares
#: ``torch (>=1.8.*)``: "Please use pip<24.1"); those DLCs had the pip of their time.
_OLD_PIP = "pip<24.1"
#: Why the 2.6 to 2.9 images run 3.11 for the DLC's 3.12 rather than 3.13: their DLC files pin
#: ``thinc==8.3.4`` (spaCy's), whose PyPI release declares ``Requires-Python <3.13,>=3.9``, so
#: ``pip install`` finds no version on 3.13 (checked with ``pip download --python-version``).
_THINC = "AWS pins thinc==8.3.4, which has no release for Python 3.13"
FAMILIES: tuple[Family, ...] = (
    Family("1.12", ("1.12.0", "1.12.1"), ("py38",), "1.12.1", "3.9",
           ("3.7", "3.10"), constraints=("numpy<2", _OLD_PIP), lightning="1.6.3"),
    Family("1.13", ("1.13.1",), ("py39",), "1.13.1", "3.9", ("3.7", "3.11"),
           constraints=("numpy<2", _OLD_PIP), lightning="1.9.5"),
    Family("2.0", ("2.0.0", "2.0.1"), ("py310",), "2.0.1", "3.11", ("3.8", "3.11"),
           constraints=("numpy<2",), lightning="2.0.9"),
    Family("2.1", ("2.1.0",), ("py310",), "2.1.0", "3.11", ("3.8", "3.11"),
           constraints=("numpy<2",), lightning="2.1.4"),
    Family("2.2", ("2.2.0",), ("py310",), "2.2.0", "3.11", ("3.8", "3.12"),
           constraints=("numpy<2",)),
    Family("2.3", ("2.3.0",), ("py311",), "2.3.0", "3.11", ("3.8", "3.12")),
    Family("2.4", ("2.4.0",), ("py311",), "2.4.0", "3.11", ("3.8", "3.12")),
    Family("2.5", ("2.5.1",), ("py311",), "2.5.1", "3.11", ("3.9", "3.13")),
    Family("2.6", ("2.6.0",), ("py312",), "2.6.0", "3.11", ("3.9", "3.13"), python_why=_THINC),
    Family("2.7", ("2.7.1",), ("py312",), "2.7.1", "3.11", ("3.9", "3.13"), python_why=_THINC),
    Family("2.8", ("2.8.0",), ("py312",), "2.8.0", "3.11", ("3.9", "3.13"), python_why=_THINC),
    Family("2.9", ("2.9.0",), ("py312",), "2.9.0", "3.11", ("3.10", "3.14"), python_why=_THINC),
    Family("2.10", ("2.10.0",), ("py313",), "2.10.0", "3.13", ("3.10", "3.14")),
    Family("2.11", ("2.11.0",), ("py312",), "2.11.0", "3.13", ("3.10", "3.14"),
           toolkit=("5.1.1", "3.0.0"), toolkit_source=_LOCKED.format(v="2.11")),
    Family("2.12", ("2.12.1",), ("py312",), "2.12.1", "3.13", ("3.10", "3.14"),
           toolkit=("5.1.1", "3.0.0"), toolkit_source=_LOCKED.format(v="2.12")),
    Family("2.13", ("2.13.0",), ("py312",), "2.13.0", "3.11", ("3.10", "3.14"), toolkit=("5.1.1", "3.0.0"),
           toolkit_source=_LOCKED.format(v="2.13"), lightning="2.6.6",
           python_why="the only CPU build of torch 2.13 here is for CPython 3.11"),
)
_BY_NAME = {f.name: f for f in FAMILIES}
_BY_VERSION = {v: f for f in FAMILIES for v in f.dlc_versions}


@dataclass(frozen=True)
class Selection:
    """What a job asked for (``framework_version``/``py_version`` or a DLC tag) and what runs.

    ``family`` is None for ``"current"``: this machine's torch on the process backend, the
    default image on docker.
    """

    framework_version: str  #: as asked ("1.12", "1.12.0", "current")
    py_version: str | None  #: as asked, or the DLC's when not given
    family: Family | None
    source: str  #: "framework_version", "image_uri" or "current"
    deviations: tuple[str, ...] = field(default=())
    #: A Hugging Face DLC's transformers release (its ``image_uri`` tag); None: a PyTorch DLC.
    transformers_version: str | None = None

    def image(self, instance_type: InstanceType) -> dlc.Image:
        """The DLC image a job with this selection runs on ``instance_type`` (its first instance
        group's: one ``TrainingImage`` serves every host): see :func:`image_of`."""
        return image_of(self, instance_type)

    @property
    def dlc_version(self) -> str | None:
        """The full DLC version ("1.12" -> "1.12.1"); None for ``current``."""
        if self.family is None:
            return None
        return self.framework_version if self.framework_version in self.family.dlc_versions \
            else self.family.default_version

    def emulator_fields(self, *, torch: str | None = None, python: str | None = None,
                        toolkit: tuple[str | None, str | None] | None = None,
                        deviations: Iterable[str] | None = None) -> dict[str, object]:
        """``job.json`` ``Emulator.Framework``: what was asked and which torch and Python ran.

        ``torch``/``python``/``toolkit`` override the table (a backend passes what really runs:
        the process backend its interpreter's, the docker backend what the image holds);
        ``deviations`` replace :attr:`deviations` (see :meth:`deviations_when`).
        """
        fam = self.family
        kit = toolkit or (fam.toolkit if fam else None)
        return {
            "FrameworkVersion": self.framework_version,
            "PyVersion": self.py_version,
            "Source": self.source,
            "Family": fam.name if fam else CURRENT,
            "Torch": torch or (fam.torch if fam else None),
            "Python": python or (fam.python if fam else None),
            "Toolkit": {"sagemaker-training": kit[0], "sagemaker-pytorch-training": kit[1]} if kit else None,
            "Deviations": list(self.deviations if deviations is None else deviations),
        }

    def deviations_when(self, *, python: str, python_from: str,
                        toolkit: tuple[str | None, str | None] | None = None) -> tuple[str, ...]:
        """:attr:`deviations` for a run whose Python (``"3.11"`` or ``"3.11.2"``, from
        ``python_from``, e.g. "this machine's interpreter") and toolkits are not the family
        image's (the process backend); the family image's own values give :attr:`deviations`."""
        if self.family is None or self.py_version is None:
            return ()
        return _deviations(self.family, self.framework_version, self.py_version,
                           python=".".join(python.split(".")[:2]), python_from=python_from,
                           toolkit=toolkit, toolkit_from="this machine's")


def image_of(selection: Selection | None, instance_type: InstanceType) -> dlc.Image:
    """The DLC image a job runs (:mod:`emulator.job.dlc`): no DLC named (nothing asked, or
    ``current``) → :data:`emulator.job.dlc.CURRENT_IMAGE`; a Hugging Face tag → that Hugging Face
    image; else the family's PyTorch image for the instance type (GPU types: the GPU image)."""
    if selection is None or selection.family is None:
        return dlc.image(dlc.CURRENT_IMAGE)
    if selection.transformers_version is not None:
        return dlc.huggingface_image(selection.transformers_version, field=FIELD_IMAGE)
    return dlc.pytorch_image(selection.family.name, gpu=instance_type.is_gpu)


def toolkit_for(selection: Selection | None, image: dlc.Image) -> tuple[str, str]:
    """The toolkits a job's world holds: its family's (AWS's where documented), or with no DLC named
    the emulator's pins (:data:`PINNED_TOOLKIT`; the default world is not a DLC, and its image's 5.1.1
    runs the launcher through ``/bin/sh -c``, see ``emulator/job/toolkit_model.py``)."""
    if selection is None or selection.family is None:
        return PINNED_TOOLKIT
    kit = family(image.family).toolkit
    return kit[0], kit[1]


def install_set(image: dlc.Image, *, toolkit: tuple[str, str] | None = None,
                torch_index: str | None = None) -> dlc.InstallSet:
    """What the emulator installs for ``image`` (:func:`emulator.job.dlc.install_set`) with its
    family's pins and ``toolkit`` (default: the family's); ``torch_index``: an index with the DLC's
    exact torch builds."""
    fam = family(image.family)
    return dlc.install_set(image, toolkit=toolkit or fam.toolkit, constraints=fam.constraints,
                           torch_index=torch_index)


def install_for(selection: Selection | None, instance_type: InstanceType, *,
                torch_index: str | None = None) -> dlc.InstallSet:
    """What a job with ``selection`` on ``instance_type`` gets installed: its image's packages and
    :func:`toolkit_for` its toolkits."""
    image = image_of(selection, instance_type)
    return install_set(image, toolkit=toolkit_for(selection, image), torch_index=torch_index)


def image_label(selection: Selection | None, instance_type: InstanceType) -> str:
    """How messages name the job's packages: ``the PyTorch 2.5.1 GPU DLC``; with no DLC named,
    ``the emulator's default (the PyTorch 2.13.0 CPU DLC's packages)``."""
    img = image_of(selection, instance_type)
    if selection is None or selection.family is None:
        return f"the emulator's default world (the packages of {img.label})"
    return img.label


def _allowed_versions() -> str:
    names = [v for f in FAMILIES for v in (f.name, *f.dlc_versions)]
    return ", ".join([*dict.fromkeys(names), CURRENT])


def family(name: str) -> Family:
    """The family for a family name or any version it covers ("1.12", "1.12.0"); RequestError
    otherwise."""
    fam = _BY_NAME.get(name) or _BY_VERSION.get(name)
    if fam is None:
        _unknown(name, FIELD_VERSION)
    return fam  # type: ignore[return-value]  # _unknown never returns


def _unknown(version: str, where: str) -> None:
    if version in NO_WHEEL or any(v.rsplit(".", 1)[0] == version for v in NO_WHEEL):
        raise RequestError(
            where, f"PyTorch {version} has a SageMaker DLC, but the emulator has no CPU-runnable "
            "torch wheel for it (covered: 1.12 and newer)", allowed=_allowed_versions())
    raise RequestError(where, f"unknown PyTorch framework version {version!r}",
                       allowed=_allowed_versions())


def _torch_line(fam: Family) -> str:
    """The deviation of the torch builds before a job's layer says which it holds (the docker backend's
    images and ``plan``: PyPI's builds)."""
    return (f"torch {fam.torch} (and torchvision, torchaudio) are PyPI's builds, CUDA builds running on the CPU, "
            f"not the DLC's own (AWS's +cuXXX builds; +cpu on CPU images); the process backend's framework layer "
            f"holds the +cpu builds where {dlc.DEFAULT_TORCH_INDEX} (or {dlc.TORCH_INDEX_VAR}) was reachable when it "
            "was made")


def _deviations(fam: Family, version: str, py: str, *, python: str | None = None,
                python_from: str | None = None, toolkit: tuple[str | None, str | None] | None = None,
                toolkit_from: str | None = None) -> tuple[str, ...]:
    """What differs from the DLC when ``fam``'s torch runs on ``python`` (default: the family
    image's) with ``toolkit`` (default: the family image's; ``toolkit_from`` says whose)."""
    out = []
    if version in fam.dlc_versions and version != fam.torch:
        out.append(f"torch {fam.torch} runs instead of the DLC's {version} (one image per family)")
    out.append(_torch_line(fam))
    why = f"; {fam.python_why}" if fam.python_why and python_from is None else ""
    python = python or fam.python
    python_from = python_from or f"Debian {fam.suite}'s python3"
    want = f"{py[2]}.{py[3:]}" if re.fullmatch(r"py3\d+", py) else None
    if want and want != python:
        out.append(f"Python {python} runs instead of the DLC's {want} ({python_from}{why})")
    kit = toolkit or fam.toolkit
    whose = toolkit_from or ("the emulator's pins" if kit == fam.toolkit else "this machine's")
    if kit != fam.toolkit and fam.toolkit_source is not None:
        out.append(f"sagemaker-training {kit[0]} / sagemaker-pytorch-training {kit[1]} run "
                   f"instead of the DLC's {fam.toolkit[0]} / {fam.toolkit[1]} ({whose})")
    elif fam.toolkit_source is None:
        out.append(f"sagemaker-training {kit[0]} / sagemaker-pytorch-training "
                   f"{kit[1]} ({whose}; the DLC's exact versions are not documented)")
    return tuple(out)


def select(framework_version: str | None = None, py_version: str | None = None, *,
           image_uri: str | None = None) -> Selection | None:
    """The framework a job runs with, or None for today's default (nothing asked).

    ``framework_version`` wins over the tag of a DLC ``image_uri`` (the SDK derives the URI from
    it). ``"current"`` keeps this machine's torch explicitly. Raises :class:`RequestError` naming
    the field for an unknown version, a ``py_version`` the DLC never had, or a DLC the table has
    no wheel for.
    """
    source = FIELD_VERSION
    transformers = None
    if framework_version is None and image_uri:
        parsed = parse_dlc_image(image_uri)
        if parsed is None:
            return None
        framework_version, tag_py, transformers = parsed
        py_version = py_version or tag_py
        source = "image_uri"
    if framework_version is None:
        if py_version is not None:
            raise RequestError(FIELD_PY, "py_version needs a framework_version",
                               allowed=f"any py_version with a framework_version ({_allowed_versions()})")
        return None
    version = str(framework_version).strip()
    if version == CURRENT:
        return Selection(CURRENT, py_version, None, CURRENT)
    where = FIELD_VERSION if source == FIELD_VERSION else FIELD_IMAGE
    fam = _BY_NAME.get(version) or _BY_VERSION.get(version)
    if fam is None:
        _unknown(version, where)
        raise AssertionError("unreachable")
    if transformers is not None:
        hf = dlc.huggingface_image(transformers, field=FIELD_IMAGE)
        if hf.family != fam.name:
            raise RequestError(FIELD_IMAGE, f"the Hugging Face transformers {transformers} DLC is built on PyTorch "
                               f"{hf.framework_version}, not {version}", allowed=f"{hf.framework_version}-transformers"
                               f"{transformers}-gpu-… (the SDK's image_uris.retrieve gives it)")
    if py_version is not None and py_version not in fam.dlc_py:
        raise RequestError(FIELD_PY, f"PyTorch {version} DLCs were built for "
                           f"{', '.join(fam.dlc_py)} only, got {py_version!r}",
                           allowed=", ".join(fam.dlc_py))
    py = py_version or fam.dlc_py[-1]
    return Selection(version, py, fam, "image_uri" if source != FIELD_VERSION else source,
                     _deviations(fam, version, py), transformers_version=transformers)


#: DLC training repositories: ``pytorch-training`` (to 2.10), ``pytorch`` (2.11 on, amzn2023) and
#: the Hugging Face variant; the registry is an ECR account/region or ``public.ecr.aws/<alias>``.
_DLC_REPO = re.compile(
    r"^(?:\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?|public\.ecr\.aws/[^/]+)/"
    r"(?P<repo>(?:huggingface-)?pytorch-training(?:-[a-z0-9]+)?|pytorch)(?::(?P<tag>[^@]+))?(?:@.*)?$"
)
_TAG = re.compile(r"^(?P<version>\d+\.\d+(?:\.\d+)?)-(?P<rest>.*)$")
_OTHER_DLC = re.compile(
    r"^(?:\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?|public\.ecr\.aws/[^/]+)/"
    r"(?P<repo>(?:huggingface-)?(?:tensorflow|mxnet|xgboost|sklearn)[a-z0-9-]*)(?::|@|$)"
)


def parse_dlc_image(image_uri: str) -> tuple[str, str | None, str | None] | None:
    """``(framework_version, py_version or None, transformers_version or None)`` from a PyTorch
    or Hugging Face DLC training image URI.

    ``…/pytorch-training:1.12.1-gpu-py38`` -> ("1.12.1", "py38");
    ``…/pytorch-training:2.2.0-gpu-py310-cu121-ubuntu20.04-sagemaker`` -> ("2.2.0", "py310");
    ``…/pytorch:2.13.0-cpu-amzn2023-sagemaker`` -> ("2.13.0", None);
    ``…/huggingface-pytorch-training:2.5.1-transformers4.49.0-gpu-py311-cu124-ubuntu22.04`` ->
    ("2.5.1", "py311", "4.49.0"). None for an image that is
    not a PyTorch DLC or carries no version (a digest only): it runs as given / as today.
    A TensorFlow/MXNet/... DLC raises :class:`RequestError` (no wheel for that framework).
    """
    other = _OTHER_DLC.match(image_uri)
    if other:
        raise RequestError(FIELD_IMAGE, f"{other['repo']} images are not emulated: the emulator "
                           "has no wheels for that framework",
                           allowed="PyTorch DLC images (pytorch-training, pytorch) or your own image")
    m = _DLC_REPO.match(image_uri)
    if m is None or not m["tag"]:
        return None
    tag = _TAG.match(m["tag"])
    if tag is None:
        return None
    py = re.search(r"(?:^|-)(py3\d+)(?:-|$)", tag["rest"])
    transformers = re.search(r"(?:^|-)transformers(\d+\.\d+\.\d+)(?:-|$)", tag["rest"])
    if m["repo"].startswith("huggingface-") and transformers is None:
        raise RequestError(FIELD_IMAGE, f"a Hugging Face DLC tag names its transformers release, {m['tag']!r} does not",
                           allowed="<torch>-transformers<version>-gpu-py3XX-… (the SDK's image_uris.retrieve gives it)")
    return tag["version"], py.group(1) if py else None, transformers.group(1) if transformers else None


#: Families the process backend runs: each has a 2-host smoke test (tests/jobs/test_families.py, ``nox -s
#: families``; 2.13 is the torch the whole suite runs). Other families install and may work, but a
#: family's gap (as 2.2's optimizer's CUDA-graph check was) shows only when it runs, so they are
#: refused unless :data:`UNTESTED_VAR` is ``1``.
SMOKE_TESTED = ("2.0", "2.2", "2.5", "2.8", "2.13")
#: ``SAGEMAKER_EMULATOR_UNTESTED_FAMILIES=1``: run a family without a smoke test on the process backend.
UNTESTED_VAR = "SAGEMAKER_EMULATOR_UNTESTED_FAMILIES"


def process_refusal(selection: Selection | None, python: tuple[int, int],
                    python_label: str | None = None, *, allow_untested: bool = False) -> str | None:
    """Why the process backend cannot run ``selection`` with the caller's interpreter, or None.

    Pure: ``python`` is the caller's (major, minor). None means the named torch has a wheel for
    that Python, so the process backend can install it into the job environment (or, for
    ``current``/nothing asked, simply use the caller's torch).
    """
    if selection is None or selection.family is None:
        return None
    fam = selection.family
    if fam.runs_on(python):
        if fam.name in SMOKE_TESTED or allow_untested:
            return None
        return (f"framework_version {selection.framework_version}: the torch {fam.name} family has no smoke "
                f"test on the process backend (tested: {', '.join(SMOKE_TESTED)}), so a gap of its torch "
                f"in the emulated GPUs would show only as a failed job; use a tested family's version, "
                f"or set {UNTESTED_VAR}=1 to run it anyway")
    here = python_label or f"{python[0]}.{python[1]}"
    low, high = fam.wheel_pythons
    return (f"framework_version {selection.framework_version}: torch {fam.torch} has no wheel "
            f"for this interpreter's Python {here} (it supports Python {low} to {high}); run "
            f"it with --backend docker (image {fam.tag_name}: Python {fam.python}, torch "
            f"{fam.torch}), or use framework_version='current' for this machine's torch")


#: Any PyTorch training DLC repository, with or without a tag (a digest-only URI included).
_ANY_DLC = re.compile(
    r"^(?:\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?|public\.ecr\.aws/[^/]+)/"
    r"(?:[a-z0-9-]*/)?(?:huggingface-)?pytorch(?:-training(?:-[a-z0-9]+)?)?(?::|@|$)"
)


def is_dlc_image(image_uri: str | None) -> bool:
    """Whether ``image_uri`` names a PyTorch training DLC (which the emulator stands in for)
    rather than the user's own image (which runs as given)."""
    return bool(image_uri) and _ANY_DLC.match(image_uri or "") is not None


def record(selection: Selection | None, *, torch: str | None, python: str | None,
           toolkit: tuple[str | None, str | None] | None,
           python_from: str | None = None, image: dlc.Image | None = None,
           torch_build: Mapping[str, object] | None = None) -> dict[str, object]:
    """``job.json`` ``Emulator.Framework``: what the job asked (``selection``; None: nothing) and
    the torch, Python and toolkits that really ran (None where unknown, e.g. a user's image
    without them). ``python_from`` (the process backend: "this machine's interpreter") makes the
    deviations those of that Python and toolkit instead of the family image's. ``image``: the DLC
    image whose packages the job sees (its id, source and what is not installed: ``Image``).
    ``torch_build``: the torch builds the job's framework layer holds, by its own record
    (:func:`emulator.backends.layers.torch_build`): ``TorchBuild``, and the torch deviation says them."""
    if selection is None or selection.family is None:
        fields: dict[str, object] = {
            "FrameworkVersion": selection.framework_version if selection else None,
            "PyVersion": selection.py_version if selection else None,
            "Source": selection.source if selection else "default", "Family": CURRENT,
            "Torch": torch, "Python": python,
            "Toolkit": {"sagemaker-training": toolkit[0], "sagemaker-pytorch-training": toolkit[1]}
            if toolkit else None,
            "Deviations": [f"no DLC named: the job sees the packages of {image.label} (the emulator's default), "
                           "whatever the instance type, with the emulator's toolkit pins "
                           f"{PINNED_TOOLKIT[0]} / {PINNED_TOOLKIT[1]}"] if image is not None else []}
    else:
        deviations = selection.deviations if python_from is None or python is None else \
            selection.deviations_when(python=python, python_from=python_from, toolkit=toolkit)
        fields = selection.emulator_fields(torch=torch, python=python, toolkit=toolkit, deviations=deviations)
    if image is not None:
        fields["Image"] = {"Id": image.id, "Name": image.label, "Source": image.source,
                           "NotInstalled": image.gaps}
    if torch_build is not None and image is not None:
        fields["TorchBuild"] = dict(torch_build)
        fields["Deviations"] = _with_torch_build(fields["Deviations"], image, torch_build,  # type: ignore[arg-type]
                                                 selection.family if selection else None)
    return fields


def _with_torch_build(deviations: list[str], image: dlc.Image, build: Mapping[str, object],
                      fam: Family | None) -> list[str]:
    """``deviations`` with the generic torch sentence replaced by what the layer's ``build`` holds."""
    builds = build.get("Builds")
    torch = str(builds.get("torch", "")) if isinstance(builds, Mapping) else ""
    source = build.get("Source")
    line = dlc.torch_deviation(image, index=None if source == "PyPI" else str(source),
                               torch=torch or image.framework_version)
    generic = _torch_line(fam) if fam is not None else None
    out = [d for d in deviations if d != generic]
    return [*out, line] if line else out


def table(families: Iterable[Family] = FAMILIES) -> list[Mapping[str, str]]:
    """Rows for people (``docs/guides/frameworks.md``, ``python -m emulator frameworks``): one per family."""
    return [{"family": f.name, "dlc": ", ".join(f"{v} {'/'.join(f.dlc_py)}" for v in f.dlc_versions),
             "torch": f.torch, "python": f"{f.python} ({f.suite})",
             "toolkits": "/".join(f.toolkit) + ("" if f.toolkit_source else " (pinned)"),
             "lightning tested": f.lightning or "-"} for f in families]


__all__ = [
    "CURRENT",
    "FAMILIES",
    "SMOKE_TESTED",
    "UNTESTED_VAR",
    "Family",
    "Selection",
    "family",
    "image_label",
    "image_of",
    "install_for",
    "install_set",
    "is_dlc_image",
    "parse_dlc_image",
    "process_refusal",
    "record",
    "select",
    "table",
    "toolkit_for",
]
