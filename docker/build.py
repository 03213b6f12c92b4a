"""Build the emulator's docker images: one per SageMaker training DLC image (emulator/job/dlc.py).

Each image holds what the emulator installs for its DLC (:func:`emulator.job.dlc.install_set`): the
DLC's packages that install from PyPI on this CPU, at AWS's versions where AWS pins them and as pip
resolved them when AWS built the image otherwise (``--uploaded-prior-to`` the DLC's date), the
family's torch builds, and the toolkits. The torch builds are the ``+cpu`` ones from the PyTorch CPU
index where it is reachable (``SAGEMAKER_EMULATOR_TORCH_INDEX``, as for the process backend's
layers: :func:`emulator.backends.layers.torch_source`; an image already built for either source is
used without a probe), else PyPI's CUDA builds with their ``nvidia-*`` wheels (GBs more). The build
resolves the index's builds for the image's own Python and downloads them (``torch-wheels.sh``),
then installs them with the first step, dated as the rest. On Debian's ``python3`` of the family's
suite (emulator/job/frameworks.py) in a venv at ``/opt/venv``, with Open MPI and OpenSSH for the
toolkit's MPI runner. The image records what it holds (``/opt/sm-emulator/manifest.json``, from the installed
files: emulator/backends/manifest.py), which the docker backend reads.

    python docker/build.py                         # the default image (no DLC named), also :latest
    python docker/build.py --framework 1.12        # that family's GPU image (--device cpu: its CPU image)
    python docker/build.py --image huggingface-4.49.0-pytorch-2.5-gpu
    python docker/build.py --image pytorch-2.5-gpu --print-tag
    python docker/build.py --framework 2.5 --torch-index pypi   # PyPI's builds, no probe

Steps: hash the inputs (what is installed, the base image id, Dockerfile, this script, the context
files); if ``sagemaker-emulator:<image id>-<hash>`` exists, stop; build the Debian base with
``build-base.sh`` (debootstrap; no Docker Hub) unless ``--base-image`` names one; write the build
context ``docker/.build/<image id>/`` (steps/: what each pip run installs, constraints.txt, entrypoint.sh, manifest.py,
this machine's CA bundle, for a TLS-inspecting proxy); ``docker build``. pip runs inside the build
(the default bridge network reaches PyPI), so this machine's pip and Python play no part.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / ".build"
REPO = "sagemaker-emulator"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: Files of docker/ copied into every build context (and hashed).
CONTEXT_FILES = ("entrypoint.sh", "torch-wheels.sh")
#: The manifest writer, run by the image's Python at build time (copied into the context, hashed).
MANIFEST_SCRIPT = ROOT / "emulator" / "backends" / "manifest.py"
#: Minutes a cold build takes on the 2-core CI machine, for the estimate shown before a build.
ESTIMATE_MIN = {"base": 2, "image": 15}
#: Debian packages an image of that suite needs besides the Dockerfile's (bullseye's pip on
#: Python 3.9 imports distutils, packaged separately there).
SUITE_PACKAGES = {"bullseye": ("python3-distutils",)}


def _emulator() -> tuple[Any, Any]:
    """``emulator.job.dlc`` and ``emulator.job.frameworks``, importable without installing the project."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from emulator.job import dlc, frameworks

    return dlc, frameworks


def _docker(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=False, text=True, capture_output=capture)


def _image_id(tag: str) -> str | None:
    out = _docker("image", "inspect", "-f", "{{.Id}}", tag, capture=True)
    return out.stdout.strip() if out.returncode == 0 else None


def resolve(image: str | None = None, *, framework: str | None = None, device: str = "gpu",
            torch_index: str | None = None, base_image: str | None = None) -> Any:
    """What to build (:class:`emulator.job.dlc.InstallSet`): the DLC image ``image`` (an id), else the
    ``device`` image of ``framework``'s family, else the default world (no DLC named: the newest
    family's CPU image with the emulator's toolkit pins, ``frameworks.install_for(None, …)``).

    Its torch builds come from ``torch_index`` (an index URL, or ``pypi``: PyPI's); where it is None,
    :func:`torch_source` chooses."""
    dlc, frameworks = _emulator()
    if image:
        img, toolkit = dlc.image(image), None
    elif framework:
        img, toolkit = dlc.pytorch_image(frameworks.family(framework).name, gpu=device == "gpu"), None
    else:
        img, toolkit = dlc.image(dlc.CURRENT_IMAGE), frameworks.PINNED_TOOLKIT

    def of(index: str | None) -> Any:
        return frameworks.install_set(img, toolkit=toolkit, torch_index=index)

    if torch_index is not None:
        return of(dlc.torch_index_setting({dlc.TORCH_INDEX_VAR: torch_index}))
    return torch_source(of, base_image=base_image)


def torch_source(of: Callable[[str | None], Any], *, base_image: str | None = None,
                 env: Any = None) -> Any:
    """``of(index)`` or ``of(None)`` (PyPI's torch builds) as the process backend's layers choose
    (:func:`emulator.backends.layers.torch_source`), with "made" meaning its image is built: an
    image of either source already built wins without network, else the CPU index where the probe
    finds the family's torch build there, else PyPI."""
    _emulator()
    from emulator.backends import layers

    return layers.torch_source(of, env, made=lambda install: bool((tag := image_tag(install, base_image))
                                                                   and _image_id(tag)))


def torch_index_arg(install: Any) -> str:
    """The ``--torch-index`` value that makes :func:`resolve` give ``install``'s torch source again."""
    dlc, _ = _emulator()
    return str(install.torch_index or dlc.PYPI_ONLY)


def image_python(install: Any) -> str:
    """The Python (Debian's ``python3``) of the family image of ``install``'s DLC image."""
    return str(_emulator()[1].family(install.image.family).python)


def suite(install: Any) -> str:
    return str(_emulator()[1].family(install.image.family).suite)


def name(install: Any) -> str:
    """The tag's name: the DLC image's id, or ``default`` for the default world (its toolkits are the
    emulator's pins, not the family's)."""
    _, frameworks = _emulator()
    default = frameworks.install_set(install.image).toolkits != install.toolkits
    return "default" if default else str(install.image.id)


def base_tag(suite_name: str) -> str:
    return f"{REPO}-base:{suite_name}"


def inputs(install: Any) -> dict[str, Any]:
    """What the image installs: ``steps``, one pip run each in order (``requirements`` (pip lines),
    ``date`` for pip's ``--uploaded-prior-to``, ``no_deps``), the torch builds in the first;
    ``uninstall``; ``constraints``; and the modules the build imports to prove the venv works.

    A PyTorch image is one resolution of the torch builds and its packages, then what AWS installs
    with ``--no-deps``. A Hugging Face image follows AWS's order (:attr:`emulator.job.dlc.InstallSet.steps`):
    its base image's set with the torch builds, then one run per ``pip install`` command of its own
    file, then what that file uninstalls; one resolution of it all can have no answer (4.56.2)."""
    dlc, _ = _emulator()
    img = install.image
    torch = [r.replace("===", "==") for r in install.torch]
    steps = [{"requirements": list(step.packages), "date": step.uploaded_prior_to or "", "no_deps": step.no_deps}
             for step in install.steps or dlc.single_steps(install)]
    # From PyPI the torch builds are part of the first pip run; from a CPU index the build resolves
    # and downloads them first (torch-wheels.sh) and the first run installs those files.
    if not install.torch_index:
        steps[0]["requirements"] = torch + steps[0]["requirements"]
    requirements = [r for step in steps for r in step["requirements"]]
    checks = ["torch", "sagemaker_training"] + (["mpi4py.MPI"] if "mpi4py" in img.distributions else [])
    # cv2 loads libGL and friends, the DLC's system libraries only the image's stage installs.
    image_checks = ["cv2"] if any(r.startswith("opencv-python") for r in requirements) else []
    return {"steps": [s for n, s in enumerate(steps) if s["requirements"] or (n == 0 and install.torch_index)],
            "torch_index": install.torch_index or "", "torch": torch if install.torch_index else [],
            "uninstall": list(install.uninstall),
            "constraints": list(install.constraints), "toolkits": list(install.toolkits),
            "check": ", ".join(checks), "image_check": ", ".join([*checks, *image_checks])}


def step_files(data: dict[str, Any]) -> dict[str, str]:
    """The context's ``steps/`` folder: ``NN.in`` per step, ``steps.txt`` (``file date flag`` lines
    the Dockerfile reads in order; ``-`` for no date, ``no-deps`` or ``-``), ``uninstall.txt``,
    ``torch.in`` (the torch builds to take from the CPU index; empty: they are in the first step)."""
    files: dict[str, str] = {}
    order = []
    for n, step in enumerate(data["steps"]):
        name = f"{n:02d}.in"
        files[name] = "".join(f"{r}\n" for r in step["requirements"])
        order.append(f"{name} {step['date'] or '-'} {'no-deps' if step['no_deps'] else '-'}\n")
    files["steps.txt"] = "".join(order)
    files["uninstall.txt"] = "".join(f"{n}\n" for n in data["uninstall"])
    files["torch.in"] = "".join(f"{r}\n" for r in data["torch"])
    return files


def image_hash(install: Any, base_id: str) -> str:
    """Hash of an image's inputs: the base, what it installs, Dockerfile, this script, the context files."""
    h = hashlib.sha256(base_id.encode())
    data = inputs(install)
    h.update("\n".join([install.image.id, image_python(install), *(f"{k}\0{v}" for k, v in step_files(data).items()),
                        "\0", *data["constraints"], "\0", *data["toolkits"], data["check"],
                        data["torch_index"]]).encode())
    for path in (HERE / "Dockerfile", HERE / "build.py", MANIFEST_SCRIPT, *(HERE / n for n in CONTEXT_FILES)):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def image_tag(install: Any, base_image: str | None = None) -> str | None:
    """The tag of the image of ``install`` for the current inputs, or None when its base is not built."""
    base_id = _image_id(base_image or base_tag(suite(install))) or base_image
    if base_id is None:
        return None
    return f"{REPO}:{name(install)}-{image_hash(install, base_id)}"


def estimate(install: Any, base_image: str | None = None) -> int:
    """Minutes a cold build of the image of ``install`` takes here (for the progress line)."""
    minutes = ESTIMATE_MIN["image"]
    if base_image is None and _image_id(base_tag(suite(install))) is None:
        minutes += ESTIMATE_MIN["base"]
    return minutes


def require_disk(install: Any) -> None:
    """Stop before a build that would not fit at docker's data root (``docker info``): the same
    check and message as a job's on-demand build (``emulator.backends.docker.images.require_disk``),
    so ``nox -s image`` and ``python docker/build.py`` refuse as a job does."""
    _emulator()
    from emulator.backends.docker.images import require_disk as check
    from emulator.errors import BackendUnavailable

    root = _docker("info", "-f", "{{.DockerRootDir}}", capture=True).stdout.strip()
    try:
        check(install.image, root or None)
    except BackendUnavailable as exc:
        raise SystemExit(f"image: {exc}") from None


def build_image(install: Any, *, base_image: str | None, force: bool, latest: bool = False,
                say: Callable[[str], None] = print) -> str:
    """Build (or reuse) the image of ``install``; return its tag (``latest``: also tag ``:latest``)."""
    start = time.monotonic()
    img = install.image
    if base_image is None:
        subprocess.run(["bash", str(HERE / "build-base.sh"), base_tag(suite(install)), suite(install)], check=True)
    tag = image_tag(install, base_image)
    assert tag is not None
    if not force and _image_id(tag):
        if latest:
            _docker("tag", tag, f"{REPO}:latest")
        say(f"image: {tag} is up to date{' (tagged :latest)' if latest else ''}; nothing to build")
        return tag
    require_disk(install)
    source = f"the +cpu torch builds of {install.torch_index}" if install.torch_index else "PyPI's torch builds"
    say(f"image: building {tag} for {img.label} with {source} (≈ {estimate(install, base_image)} min, once)")
    ctx = BUILD / name(install)
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    data = inputs(install)
    (ctx / "steps").mkdir()
    for file, text in step_files(data).items():
        (ctx / "steps" / file).write_text(text)
    (ctx / "constraints.txt").write_text("".join(f"{c}\n" for c in data["constraints"]))
    shutil.copy2(MANIFEST_SCRIPT, ctx / "manifest.py")
    for file in CONTEXT_FILES:
        shutil.copy2(HERE / file, ctx / file)
    ca = ctx / "ca-certificates.crt"
    if CA_BUNDLE.is_file():
        shutil.copyfile(CA_BUNDLE, ca)
    else:
        ca.write_text("")
    python = image_python(install)
    from emulator.backends.docker.images import TORCH_INDEX_LABEL  # what the docker backend reads

    cmd = ["build", "--force-rm", "--build-arg", f"BASE_IMAGE={base_image or base_tag(suite(install))}",
           "--build-arg", f"CHECK_IMPORTS={data['check']}",
           "--build-arg", f"IMAGE_CHECK_IMPORTS={data['image_check']}",
           "--build-arg", f"TOOLKITS={' '.join(data['toolkits'])}",
           "--build-arg", f"EXTRA_PACKAGES={' '.join(SUITE_PACKAGES.get(suite(install), ()))}",
           "--build-arg", f"TORCH_INDEX={data['torch_index']}",
           "-f", str(HERE / "Dockerfile"), "-t", tag, *(["-t", f"{REPO}:latest"] if latest else []),
           "--label", f"sagemaker-emulator.inputs={tag}", "--label", f"sagemaker-emulator.dlc-image={img.id}",
           "--label", f"sagemaker-emulator.framework={img.family}",
           "--label", f"sagemaker-emulator.torch={img.framework_version}",
           "--label", f"{TORCH_INDEX_LABEL}={data['torch_index'] or 'PyPI'}",
           "--label", f"sagemaker-emulator.python={python}", str(ctx)]
    built = _docker(*cmd).returncode == 0
    # The builder stage's image (the legacy builder keeps it untagged): GBs nothing reuses.
    _docker("image", "prune", "--force", "--filter", "label=sagemaker-emulator.stage=builder", capture=True)
    if not built:
        raise SystemExit(f"image: docker build failed for {tag}")
    size = _docker("image", "inspect", "-f", "{{.Size}}", tag, capture=True).stdout.strip()
    say(f"image: built {tag} in {time.monotonic() - start:.0f}s, size {int(size) / 1e6:.0f} MB")
    return tag


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-image", help="build FROM this image instead of the debootstrap base "
                   "(a Debian image of the family's suite, e.g. debian:bookworm-slim where Docker Hub is reachable)")
    p.add_argument("--force", action="store_true", help="rebuild even if the hash tag exists")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--image", help="the DLC image id (emulator/job/dlc_images.json: pytorch-2.5-gpu, "
                       "huggingface-4.49.0-pytorch-2.5-gpu, ...)")
    which.add_argument("--framework", help="a family or version (1.12, 2.0.1, ...): its --device image")
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="with --framework (default gpu)")
    p.add_argument("--torch-index", metavar="URL|pypi",
                   help="where the torch builds come from: a CPU index, or pypi for PyPI's (default: the "
                   "CPU index of SAGEMAKER_EMULATOR_TORCH_INDEX where it answers, else PyPI)")
    p.add_argument("--print-tag", action="store_true", help="print the tag the current inputs give "
                   "(empty if the base is not built) and exit")
    args = p.parse_args(argv)
    try:
        install = resolve(args.image, framework=args.framework, device=args.device,
                          torch_index=args.torch_index, base_image=args.base_image)
    except KeyError as exc:
        dlc, _ = _emulator()
        raise SystemExit(f"image: unknown DLC image {exc}; known: {', '.join(sorted(dlc.images()))}") from None
    except ValueError as exc:  # emulator.errors.RequestError: a --torch-index that is no index URL
        dlc, _ = _emulator()
        raise SystemExit(f"image: {str(exc).replace(dlc.TORCH_INDEX_VAR, '--torch-index', 1)}") from None
    if args.print_tag:
        print(image_tag(install, args.base_image) or "")
        return
    if shutil.which("docker") is None:
        raise SystemExit("image: the docker CLI is missing (apt-get install docker.io)")
    default = not args.image and not args.framework
    build_image(install, base_image=args.base_image, force=args.force, latest=default)


if __name__ == "__main__":
    main()
