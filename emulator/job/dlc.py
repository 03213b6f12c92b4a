"""The DLC images: what each SageMaker training Deep Learning Container installs, and what the
emulator installs in its place.

A job on SageMaker sees the Python packages of its image and what its ``requirements.txt`` adds.
Which image: the launcher's ``framework_version`` (or ``image_uri``) picks the family, the instance
type picks the CPU or the GPU image (as the SDK's ``image_uris.retrieve`` does), and a Hugging Face
launcher (``transformers_version``) picks the Hugging Face image built ``FROM`` the PyTorch GPU
image of its torch.

The data, :data:`DATA` (``dlc_images.json``), is read from AWS's own build files by
``tools/dlc_describe`` (aws/deep-learning-containers; each image names its source file and commit):
for 1.12 to 2.10 the ``pip``/``conda`` install lines of the Dockerfile stages that end in the
SageMaker image, for 2.11 on the ``pyproject.toml`` and the whole ``uv.lock`` closure
(:attr:`Image.locked`), for Hugging Face what its Dockerfile adds to its PyTorch image.

What the emulator installs (:func:`install_set`), on both backends (the process backend's
framework layers, :mod:`emulator.backends.layers`; the docker backend's images, ``docker/build.py``):

- every package of the image that installs from PyPI on this CPU, at AWS's version where AWS pins
  one (``==``, a wheel URL, the 2.11+ lock) and otherwise resolved as pip resolved it when AWS built
  the image: pip's ``--uploaded-prior-to`` the date of the image's last source change
  (:attr:`Image.date`), so an unpinned ``pandas`` is the pandas of that day, not today's;
- torch, torchvision and torchaudio (:func:`torch_requirements`): the ``+cpu`` builds of AWS's
  releases from the PyTorch CPU index (:data:`DEFAULT_TORCH_INDEX`, or the index
  ``SAGEMAKER_EMULATOR_TORCH_INDEX`` names) where it is reachable when the layer is made — the CPU
  images' exact builds; the GPU images ship AWS's ``+cu1xx`` builds, which need a GPU —, else PyPI's
  builds of the same releases: CUDA builds (with their ``nvidia-*`` wheels) that run on the CPU.
  ``SAGEMAKER_EMULATOR_TORCH_INDEX=pypi`` means PyPI only (:func:`torch_index_setting`);
- the toolkits ``sagemaker-training``/``sagemaker-pytorch-training`` at the family's versions
  (:attr:`emulator.job.frameworks.Family.toolkit`: AWS's where documented, else the emulator's pins),
  installed after the rest without their own version requirements (the pins are newer than most
  images: sagemaker-training 5.1.4 requires protobuf>=5.28, released long after the 1.12 DLC, whose
  ``sagemaker`` SDK needs protobuf<4), then what they require that the image lacks.

Not installed, each with its reason (:data:`NOT_INSTALLABLE`): CUDA-only builds (flash-attn,
transformer-engine, apex), AWS binaries (SMDDP, SMP, awsio, smprof), packages built from source
against the DLC's CUDA torch (horovod, AWS's deepspeed builds), conda-only packages. Importing one
in a job fails with ``ModuleNotFoundError`` and an ``[emulator]`` line saying that this is the
emulator's gap, not the job's (SMDDP has the in-host stand-in instead, where the image ships it).

``current`` (no DLC named: the emulator's CLI, Python API and pytest fixture without a
``framework_version``) is :data:`CURRENT_IMAGE`, the newest family's CPU image, whatever the
instance type, so its world is one list; it is not a DLC and says so in ``job.json``.

Standard library only: the preflight runs in bare interpreters.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RequestError

DATA = Path(__file__).with_name("dlc_images.json")
#: What ``current`` (no DLC named) runs: the newest family's CPU image.
CURRENT_IMAGE = "pytorch-2.13-cpu"
#: The index the torch builds come from where it is reachable (:func:`torch_index_setting`).
TORCH_INDEX_VAR = "SAGEMAKER_EMULATOR_TORCH_INDEX"
#: PyTorch's own index of its ``+cpu`` builds (what AWS's CPU DLCs install): the default of
#: :data:`TORCH_INDEX_VAR`.
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
#: The value of :data:`TORCH_INDEX_VAR` that means PyPI's builds only (no CPU index, no probe).
PYPI_ONLY = "pypi"
#: The local version label of the builds a CPU index holds.
CPU_LABEL = "cpu"
#: The distributions that make up a family's torch (its framework layer's base; one build each).
TORCH_TRIO = ("torch", "torchvision", "torchaudio")
#: What the toolkit's ``pip install -r requirements.txt`` and builds need; every DLC has them.
PIP_TOOLS = ("pip", "setuptools", "wheel")

#: Distributions a DLC installs that the emulator does not install here, and why. Importing one in
#: a job says so (the emulator's gap, never the job's).
NOT_INSTALLABLE: dict[str, str] = {
    "flash-attn": "CUDA-only: its kernels are built with nvcc for NVIDIA GPUs; no build runs on a CPU",
    "transformer-engine": "CUDA-only: NVIDIA's kernels for GPUs (built from source in the DLC)",
    "apex": "NVIDIA apex, built from source with CUDA extensions in the DLC; not on PyPI",
    "horovod": "built from source in the DLC against its CUDA torch and NCCL; no CPU wheel on PyPI",
    "smdistributed-dataparallel": "AWS's SMDDP binary for CUDA (the emulator's in-host stand-in provides "
                                  "smdistributed.dataparallel where the image ships it)",
    "smdistributed-modelparallel": "AWS's SageMaker model parallel binary for CUDA; not on PyPI",
    "smprof": "AWS's SageMaker profiler binary for CUDA; not on PyPI",
    "smppy": "AWS's SageMaker profiler binary for CUDA; not on PyPI",
    "awsio": "AWS's S3 plugin binary (awslabs/amazon-s3-plugin-for-pytorch); not on PyPI",
    "smdebug": "built from source (awslabs/sagemaker-debugger) in the DLC for its torch",
    "dgl": "a conda CUDA build (dglteam channel) in the DLC",
    "nvidia-mathdx": "NVIDIA's CUDA math library for GPUs",
    "conda": "conda itself (the DLC's package manager); not a PyPI distribution",
    "conda-content-trust": "part of conda (the DLC's package manager); not a PyPI distribution",
    "kenlm": "built from source with cmake in the Hugging Face DLC (no wheel on PyPI)",
    "mkl": "Intel MKL's native libraries, no importable module (torch's builds bring their own)",
    "mkl-include": "Intel MKL's C headers, no importable module",
    "typing": "PyPI's backport of a standard library module, for Python before 3.5 (pip refuses it here)",
}
#: The torch release each torchtext release is built for (pytorch/text README, "Installation"):
#: its C++ extension loads beside that torch only. 0.18.0 (torch 2.3) is torchtext's last release.
TORCHTEXT_BUILT_FOR: dict[str, str] = {"0.15": "2.0", "0.16": "2.1", "0.17": "2.2", "0.18": "2.3"}
#: Local version labels of builds whose PyPI release is the same code for another device (torch's
#: ``+cpu``/``+cu124`` builds); any other label (``deepspeed==0.6.1+b3d766e``) is AWS's own build.
_DEVICE_LABEL = re.compile(r"^(cpu|cu\d+)$")

#: Import name of a distribution where it differs from its name (``-`` → ``_`` otherwise). What a
#: framework layer really provides is read from the installed files (its manifest); this table
#: serves what is not installed here and what runs before a layer exists (``plan``).
IMPORT_NAMES: dict[str, tuple[str, ...]] = {
    "scikit-learn": ("sklearn",), "opencv-python": ("cv2",), "opencv-python-headless": ("cv2",),
    "pyyaml": ("yaml",), "pillow": ("PIL",), "sagemaker-pytorch-training": ("sagemaker_pytorch_container",),
    "sagemaker-training": ("sagemaker_training", "gethostname"), "gitpython": ("git",),
    "python-multipart": ("multipart", "python_multipart"), "pyopenssl": ("OpenSSL",),
    "importlib-metadata": ("importlib_metadata",), "attrs": ("attr", "attrs"), "protobuf": ("google",),
    "ipython": ("IPython",), "ipykernel": ("ipykernel", "ipykernel_launcher"),
    "smdistributed-dataparallel": ("smdistributed",), "smdistributed-modelparallel": ("smdistributed",),
    "smdebug": ("smdebug",), "sagemaker-experiments": ("smexperiments",), "pytorch-lightning": ("pytorch_lightning",),
    "lightning-bolts": ("pl_bolts",), "scikit-image": ("skimage",), "beautifulsoup4": ("bs4",),
    "huggingface-hub": ("huggingface_hub",), "transformer-engine": ("transformer_engine",),
    "flash-attn": ("flash_attn", "flash_attn_2_cuda"), "python-dotenv": ("dotenv",), "python-dateutil": ("dateutil",),
    "msgpack": ("msgpack",), "s3torchconnector": ("s3torchconnector",), "awscli": ("awscli",),
    "nvidia-mathdx": (), "typing-extensions": ("typing_extensions",), "charset-normalizer": ("charset_normalizer",),
    "mkl": (), "mkl-include": (), "conda": ("conda",), "conda-content-trust": ("conda_content_trust",),
    "smprof": ("smprof",), "smppy": ("smppy",), "apex": ("apex",), "dgl": ("dgl",), "horovod": ("horovod",),
}


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``packaging.utils.canonicalize_name``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def import_names(distribution: str) -> tuple[str, ...]:
    """The top-level modules ``distribution`` provides (:data:`IMPORT_NAMES`, else ``-`` → ``_``)."""
    dist = canonical_name(distribution)
    return IMPORT_NAMES.get(dist, (dist.replace("-", "_"),))


@dataclass(frozen=True)
class Package:
    """One distribution an image installs, as AWS's build file says."""

    name: str  #: canonical distribution name
    requirement: str  #: as a pip requirement (``torch==2.5.1+cu124``, ``numpy<2``, ``pandas``)
    version: str | None  #: the exact version where AWS pins or locks one
    no_deps: bool = False  #: AWS installs it with ``pip install --no-deps`` (its requirements unresolved)
    #: pip: the line of the ``pip install`` command that installed it last (one resolution of AWS's build)
    command: int | None = None

    @property
    def release(self) -> str | None:
        """The pinned version without a local label (``2.5.1+cu124`` → ``2.5.1``)."""
        return self.version.split("+")[0] if self.version else None


@dataclass(frozen=True)
class Image:
    """One SageMaker training DLC image (see the module docstring)."""

    id: str  #: ``pytorch-2.5-gpu``, ``huggingface-4.49.0-pytorch-2.5-gpu``
    flavour: str  #: ``pytorch`` or ``huggingface``
    family: str  #: the torch family (``2.5``)
    framework_version: str  #: the torch release of the image
    transformers_version: str | None
    device: str  #: ``cpu`` or ``gpu``
    python: str  #: the image's Python, as AWS wrote it
    cuda: str | None
    base: str | None  #: Hugging Face: the PyTorch image it is built ``FROM``
    source_path: str
    source_commit: str
    date: str | None  #: the image's last source change (ISO 8601 UTC): pip's ``--uploaded-prior-to``
    own: tuple[Package, ...]  #: what this image's own file installs (Hugging Face: on top of ``base``)
    uninstalled: tuple[str, ...]  #: what its own file uninstalls (of ``base``'s)
    locked: Mapping[str, str] | None  #: 2.11+: every distribution ``uv sync`` installs, exactly

    @property
    def label(self) -> str:
        """How messages name the image: ``the PyTorch 2.5.1 GPU DLC``."""
        if self.flavour == "huggingface":
            return (f"the Hugging Face transformers {self.transformers_version} DLC (PyTorch "
                    f"{self.framework_version}, {self.device.upper()})")
        return f"the PyTorch {self.framework_version} {self.device.upper()} DLC"

    @property
    def source(self) -> str:
        """Where AWS writes it: ``aws/deep-learning-containers <path> @ <commit>``."""
        return f"aws/deep-learning-containers {self.source_path} @ {self.source_commit[:10]}"

    @property
    def packages(self) -> tuple[Package, ...]:
        """Everything the image installs: its base image's (Hugging Face), then its own (a later
        install of a name replaces the earlier one, as pip does), without what it uninstalls."""
        merged: dict[str, Package] = {}
        if self.base is not None:
            merged.update((p.name, p) for p in image(self.base).packages)
        for name in self.uninstalled:
            merged.pop(name, None)
        merged.update((p.name, p) for p in self.own)
        return tuple(merged[n] for n in sorted(merged))

    def package(self, name: str) -> Package | None:
        return next((p for p in self.packages if p.name == canonical_name(name)), None)

    @property
    def distributions(self) -> frozenset[str]:
        """Every distribution name the image is known to hold (the 2.11+ lock's whole closure)."""
        names = {p.name for p in self.packages}
        if self.locked is not None:
            names |= set(self.locked)
        if self.base is not None and image(self.base).locked is not None:
            names |= set(image(self.base).locked or {})
        return frozenset(names)

    @property
    def has_smddp(self) -> bool:
        """Whether the image ships SMDDP (``smdistributed-dataparallel``)."""
        return self.package("smdistributed-dataparallel") is not None

    @property
    def gaps(self) -> dict[str, str]:
        """The image's distributions the emulator does not install here, with the reason."""
        return {p.name: why for p in self.packages
                if (why := not_installable(p, torch=self.framework_version)) is not None}

    def gap_modules(self) -> dict[str, str]:
        """Top-level modules of :attr:`gaps` (what importing fails with), with the reason; SMDDP
        is left out where the in-host stand-in provides it."""
        out = {}
        for name, why in self.gaps.items():
            if name == "smdistributed-dataparallel":
                continue
            for module in import_names(name):
                out[module] = f"{name}: {why}"
        return out

    def modules(self) -> frozenset[str]:
        """Top-level modules of what the image lists (not their dependencies), by name."""
        return frozenset(m for n in self.distributions for m in import_names(n))


def not_installable(pkg: Package, *, torch: str | None = None) -> str | None:
    """Why the emulator does not install ``pkg`` here (None: it does): :data:`NOT_INSTALLABLE`, a
    source checkout (``name @ git+…``), AWS's own build of a release (a local version label), or
    a torchtext built for another torch than the image's (``torch``; :data:`TORCHTEXT_BUILT_FOR`)."""
    if pkg.name in NOT_INSTALLABLE:
        return NOT_INSTALLABLE[pkg.name]
    if pkg.name == "torchtext" and pkg.version and torch:
        built_for = TORCHTEXT_BUILT_FOR.get(".".join(pkg.version.split("+")[0].split(".")[:2]))
        if built_for is not None and ".".join(torch.split(".")[:2]) != built_for:
            return (f"torchtext {pkg.version} is built for torch {built_for} (pytorch/text's table) and its "
                    f"extension does not load beside torch {torch} here; whether the DLC's copy loads on "
                    f"SageMaker is not known")
    if " @ " in pkg.requirement:
        return f"installed in the DLC from a source checkout ({pkg.requirement.split(' @ ', 1)[1]}), not from PyPI"
    label = (pkg.version or "").partition("+")[2]
    if label and not _DEVICE_LABEL.match(label) and pkg.name not in TORCH_TRIO:
        return f"AWS's own build {pkg.name} {pkg.version} (not on PyPI)"
    return None


def _package(raw: Mapping[str, Any]) -> Package:
    return Package(canonical_name(raw["name"]), raw["requirement"], raw.get("version"), bool(raw.get("no_deps")),
                   raw.get("command"))


@functools.cache
def images() -> dict[str, Image]:
    """Every image of :data:`DATA`, by id."""
    data = json.loads(DATA.read_text())
    out = {}
    for raw in data["images"]:
        locked = raw.get("locked")
        out[raw["id"]] = Image(
            id=raw["id"], flavour=raw["flavour"], family=raw["family"], framework_version=raw["framework_version"],
            transformers_version=raw.get("transformers_version"), device=raw["device"], python=raw["python"],
            cuda=raw.get("cuda"), base=raw.get("base"), source_path=raw["source"]["path"],
            source_commit=raw["source"]["commit"], date=raw.get("date"),
            own=tuple(_package(p) for p in raw["packages"]),
            uninstalled=tuple(canonical_name(n) for n in raw.get("uninstalled", ())),
            locked={canonical_name(k): v for k, v in locked.items()} if locked else None)
    return out


def image(image_id: str) -> Image:
    """The image called ``image_id``; KeyError for an unknown one."""
    return images()[image_id]


def huggingface_versions() -> dict[str, Image]:
    """The Hugging Face images by ``transformers_version``."""
    return {i.transformers_version: i for i in images().values()
            if i.flavour == "huggingface" and i.transformers_version}


def pytorch_image(family: str, *, gpu: bool) -> Image:
    """The PyTorch image of ``family`` for a GPU or a CPU instance type."""
    return image(f"pytorch-{family}-{'gpu' if gpu else 'cpu'}")


def huggingface_image(transformers_version: str, *, field: str) -> Image:
    """The Hugging Face image of ``transformers_version``; RequestError naming ``field`` (with the
    known versions) for one the table does not have."""
    known = huggingface_versions()
    found = known.get(transformers_version)
    if found is None:
        raise RequestError(field, f"no Hugging Face training DLC with transformers {transformers_version} is known",
                           allowed=", ".join(f"{v} (PyTorch {i.framework_version})" for v, i in sorted(
                               known.items(), key=lambda kv: [int(x) for x in kv[0].split(".")])))
    return found


# -- what the emulator installs for an image ---------------------------------------------------------
@dataclass(frozen=True)
class InstallStep:
    """One ``pip install`` of a layer: one resolution, as one ``pip install`` command of AWS's build is."""

    packages: tuple[str, ...]
    no_deps: bool  #: AWS's command has ``--no-deps``
    uploaded_prior_to: str | None  #: pip's ``--uploaded-prior-to``

    def key_material(self) -> list[str]:
        return [*self.packages, "--no-deps" if self.no_deps else "", self.uploaded_prior_to or "", "\0"]


@dataclass(frozen=True)
class InstallSet:
    """What the emulator installs for an image, as pip requirements (see the module docstring)."""

    image: Image
    torch: tuple[str, ...]  #: the torch builds (a layer of their own: several GB, shared by a family's images)
    packages: tuple[str, ...]  #: everything else the image installs that installs here
    no_deps: tuple[str, ...]  #: what AWS installs with ``--no-deps``: installed so, after :attr:`packages`
    toolkits: tuple[str, ...]  #: the toolkits at the family's versions (installed last, without their deps)
    constraints: tuple[str, ...]  #: exact versions AWS locked (2.11+) and the family's own pins
    torch_constraints: tuple[str, ...]  #: the family's own pins (what the torch builds are installed with)
    uploaded_prior_to: str | None  #: pip's ``--uploaded-prior-to`` for what AWS left unpinned
    #: The same for the torch builds' own requirements (numpy, pillow, ...): the family's GPU image's
    #: date, so every image of a family shares one set of torch builds.
    torch_uploaded_prior_to: str | None
    gaps: Mapping[str, str]  #: not installed, with the reason
    torch_index: str | None  #: the CPU index :attr:`torch` comes from (None: PyPI's builds)
    #: Hugging Face (both backends: the process layer, the docker image's ``steps/``): the installs
    #: in AWS's order, replacing :attr:`packages` and :attr:`no_deps`: the base PyTorch image's set,
    #: then each ``pip install`` command of the Hugging Face Dockerfile. One resolution of everything
    #: cannot always be solved where AWS's successive commands
    #: are: the 4.56.2 image's ``s3fs==2025.9.0`` needs an older botocore than its base's boto3, which
    #: AWS's last command simply downgrades (pip's ``resolution-too-deep`` otherwise). The base's set
    #: is resolved as of the earlier of the two images' dates: AWS built the Hugging Face image from
    #: the PyTorch image of its day (4.56.2, 2026-03-17, on a 2.8 image whose file last changed on
    #: 2026-07-16: resolved as of July, its boto3 1.43.50 does not import beside the botocore 1.41.5
    #: that s3fs's aiobotocore 2.26 then installs, and the toolkit imports boto3).
    steps: tuple[InstallStep, ...] = ()
    uninstall: tuple[str, ...] = ()  #: with :attr:`steps`: what the image's own file uninstalls, last

    def key_material(self) -> list[str]:
        """What identifies the set (layer and image keys hash it)."""
        staged = ["\0steps", *(m for step in self.steps for m in step.key_material()), *self.uninstall]
        return [self.image.id, *self.torch, "\0", *self.packages, "\0", *self.no_deps, "\0", *self.toolkits, "\0",
                *self.constraints, "\0",
                self.uploaded_prior_to or "", self.torch_uploaded_prior_to or "", self.torch_index or "",
                *(staged if self.steps else [])]


def _strip_local(requirement: str) -> str:
    """``torch==2.5.1+cu124`` → ``torch==2.5.1``: PyPI publishes no local versions."""
    return re.sub(r"(==\s*[0-9][^,;\s+]*)\+[A-Za-z0-9.]+", r"\1", requirement)


def torch_index_setting(environ: Mapping[str, str]) -> str | None:
    """The CPU index the torch builds are taken from where it is reachable: the one
    :data:`TORCH_INDEX_VAR` names, :data:`DEFAULT_TORCH_INDEX` where it is unset or empty (an empty
    variable counts as unset, as the shell's ``${VAR:-default}`` does), None for :data:`PYPI_ONLY`
    (any case): PyPI's builds, no probe. A trailing ``/`` is dropped. Anything else that is not an
    http(s) or file URL: :class:`RequestError` naming the variable (a typo would otherwise mean PyPI
    without a word)."""
    value = (environ.get(TORCH_INDEX_VAR) or "").strip()
    if value.lower() == PYPI_ONLY:
        return None
    if value and not value.startswith(("http://", "https://", "file://")):
        raise RequestError(TORCH_INDEX_VAR, f"{value!r} is not an index URL",
                           allowed=f"an http://, https:// or file:// URL of a PEP 503 index, or {PYPI_ONLY!r}")
    return (value or DEFAULT_TORCH_INDEX).rstrip("/")


def torch_requirements(img: Image, *, index: str | None = None) -> tuple[str, ...]:
    """The torch builds of ``img``: exactly AWS's release of each of :data:`TORCH_TRIO` the image
    ships (a name AWS leaves unpinned stays so: torch's own pin decides it). From PyPI (no
    ``index``): ``name===release``, the build PyPI publishes under that exact version (a local
    ``+cpu`` build found elsewhere would not match torchvision's CUDA build); from a CPU ``index``:
    ``name==release+cpu`` on every image of the family (the CPU image's exact build; the GPU image's
    AWS ``+cu1xx`` build needs a GPU), so the family's images still share one torch layer."""
    out = []
    for name in TORCH_TRIO:
        pkg = img.package(name)
        if pkg is None:
            continue
        version = pkg.version or (img.framework_version if name == "torch" else None)
        if version is None:
            out.append(name)
        elif index is not None:
            out.append(f"{name}=={version.split('+')[0]}+{CPU_LABEL}")
        else:
            out.append(f"{name}==={version.split('+')[0]}")
    return tuple(out)


def torch_deviation(img: Image, *, index: str | None, torch: str) -> str | None:
    """What differs between the torch builds a job's layer holds and ``img``'s (None: nothing):
    ``index`` is where the layer's builds came from (None: PyPI), ``torch`` the version it holds."""
    pkg = img.package("torch")
    label = ((pkg.version if pkg else None) or "").partition("+")[2]
    if img.device == "gpu":
        theirs = f"AWS's +{label} builds" if label else "AWS's CUDA builds"
    else:
        theirs = f"the +{CPU_LABEL} builds from {DEFAULT_TORCH_INDEX}"
    if index is None:
        return (f"torch {torch} (and torchvision, torchaudio) are PyPI's builds, CUDA builds running on the CPU, "
                f"not the DLC's own ({theirs}): its framework layer was made from PyPI (the CPU index was not "
                f"reachable then, or {TORCH_INDEX_VAR}={PYPI_ONLY})")
    if img.device == "gpu":
        return (f"torch {torch} (and torchvision, torchaudio) are the +{CPU_LABEL} builds from {index}, not the "
                f"DLC's own ({theirs}, which need a GPU)")
    return None


def install_set(img: Image, *, toolkit: tuple[str, str], constraints: Iterable[str] = (),
                torch_index: str | None = None) -> InstallSet:
    """What the emulator installs for ``img`` (see the module docstring): the toolkits at
    ``toolkit`` (sagemaker-training, sagemaker-pytorch-training), the family's ``constraints``."""
    constraints = tuple(constraints)
    packages: list[str] = []
    no_deps: list[str] = []
    gaps = img.gaps
    trio = set(TORCH_TRIO)
    names = {p.name for p in img.packages}
    kits = ("sagemaker-training", "sagemaker-pytorch-training")
    for pkg in img.packages:
        if pkg.name not in trio and pkg.name not in gaps and pkg.name not in kits:
            (no_deps if pkg.no_deps else packages).append(_strip_local(pkg.requirement))
    packages += [name for name in PIP_TOOLS if name not in names]
    locked = dict(img.locked or {})
    skip = trio | set(gaps) | set(kits)
    exact = [f"{n}=={v.split('+')[0]}" for n, v in sorted(locked.items())
             if n not in skip and not n.startswith(("nvidia-", "triton", "cuda-"))]
    family_gpu = images().get(f"pytorch-{img.family}-gpu")
    steps: list[InstallStep] = []
    if img.base is not None:
        base = install_set(image(img.base), toolkit=toolkit, constraints=constraints, torch_index=torch_index)
        steps = [*(_no_later_than(step, img.date) for step in base.steps or single_steps(base)),
                 *_command_steps(img, skip)]
    return InstallSet(image=img, torch=torch_requirements(img, index=torch_index), packages=tuple(packages),
                      no_deps=tuple(no_deps), toolkits=(f"{kits[0]}=={toolkit[0]}", f"{kits[1]}=={toolkit[1]}"),
                      constraints=tuple([*exact, *constraints]), torch_constraints=tuple(constraints),
                      uploaded_prior_to=img.date,
                      torch_uploaded_prior_to=(family_gpu or img).date, gaps=gaps, torch_index=torch_index,
                      steps=tuple(steps), uninstall=img.uninstalled if steps else ())


def single_steps(install: InstallSet) -> list[InstallStep]:
    """A set without steps as steps: its packages in one resolution, then its ``--no-deps`` ones."""
    out = [InstallStep(install.packages, False, install.uploaded_prior_to)]
    if install.no_deps:
        out.append(InstallStep(install.no_deps, True, install.uploaded_prior_to))
    return out


def _no_later_than(step: InstallStep, date: str | None) -> InstallStep:
    """``step`` resolved as of ``date`` where its own date is later: a Hugging Face image is built
    ``FROM`` its PyTorch image as that image was when the Hugging Face one was built (ISO dates compare
    as text)."""
    if date and step.uploaded_prior_to and date < step.uploaded_prior_to:
        return InstallStep(step.packages, step.no_deps, date)
    return step


def _command_steps(img: Image, skip: set[str]) -> list[InstallStep]:
    """What ``img``'s own file installs, one step per ``pip install`` command, in the file's order."""
    by_command: dict[tuple[int, bool], list[str]] = {}
    for pkg in img.own:
        if pkg.name not in skip:
            by_command.setdefault((pkg.command or 0, pkg.no_deps), []).append(_strip_local(pkg.requirement))
    return [InstallStep(tuple(reqs), no_deps, img.date) for (_, no_deps), reqs in sorted(by_command.items())]


__all__ = ["CURRENT_IMAGE", "DEFAULT_TORCH_INDEX", "NOT_INSTALLABLE", "PYPI_ONLY", "TORCH_INDEX_VAR", "Image",
           "InstallSet", "InstallStep", "Package", "huggingface_image", "image", "images", "import_names",
           "install_set", "not_installable", "pytorch_image", "single_steps", "torch_deviation", "torch_index_setting",
           "torch_requirements"]
