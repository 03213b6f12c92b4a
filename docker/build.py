"""Build the emulator's docker image ``sagemaker-emulator:<hash>`` (and ``:latest``), offline-ish;
with ``--framework 1.12``, the image of one DLC family, ``sagemaker-emulator:torch1.12-<hash>``.

The default image's Python packages come from this machine's pip (``pip download`` with the
image's tags: CPython 3.11 on manylinux x86_64), so the build needs neither Docker Hub nor network
access from inside the build except the Debian mirror for apt. Steps:

1. hash the inputs (Dockerfile, requirements.txt, this script, the base image id); if
   ``sagemaker-emulator:<hash>`` exists, point ``:latest`` at it and stop;
2. build the base image with ``build-base.sh`` (debootstrap) unless ``--base-image`` names one;
3. download wheels and sdists into ``docker/.build/`` (gitignored) and copy in the host CA bundle;
4. ``docker build`` with ``docker/.build`` as the context.

``--lock`` re-resolves ``requirements.txt`` from ``requirements.in``.

``--framework F`` (a family or version of ``emulator/job/frameworks.py``: ``1.12``, ``2.0.1``, ...)
builds that family's image instead: Debian's python3 of the family's suite (build-base.sh with
that suite), the family's torch and toolkit versions plus the toolkits' other dependencies from
``requirements.in``, no Lightning (no DLC ships it); resolved at build time by the base image's own
pip (so a family image has no committed lock), then exactly the files of pip's report fetched
here as files, each checked against the report's sha256 (never with this machine's pip, whose
Python need not be the image's); tagged ``torch<family>-<hash of the inputs>``, never
``:latest``. Its context is ``docker/.build/torch<family>/``; the downloads stay there, so a
rebuild downloads only what changed. See :func:`ensure_image` for the backend's entry point.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent
BUILD = HERE / ".build"
REPO = "sagemaker-emulator"
DEFAULT_BASE = "sagemaker-emulator-base:bookworm"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: The image's interpreter (Debian bookworm's python3.11) and the wheel tags it accepts.
PY_ARGS = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]
#: Published only as source distributions: downloaded as sources, built inside the image.
#: Files of docker/ copied into the build context (and hashed).
CONTEXT_FILES = ("requirements.in", "requirements.txt", "entrypoint.sh")
#: Needed offline to build the sdists in the image (pinned in requirements.txt, not installed).
BUILD_ONLY = ["setuptools", "wheel", "build", "cython>=3.0.1"]
#: mpi4py is NOT here: its manylinux wheel (4.x) loads the image's Open MPI 4.1 at run time.
SDIST_ONLY = {"sagemaker-training", "sagemaker-pytorch-training", "inotify-simple"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _docker(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], check=False, text=True,
                          capture_output=capture)


def _image_id(tag: str) -> str | None:
    out = _docker("image", "inspect", "-f", "{{.Id}}", tag, capture=True)
    return out.stdout.strip() if out.returncode == 0 else None


def _requirements() -> list[str]:
    lines = (HERE / "requirements.txt").read_text().splitlines()
    return [ln.split("#")[0].strip() for ln in lines if ln.split("#")[0].strip()]


def _split(reqs: list[str]) -> tuple[list[str], list[str]]:
    sdists = [r for r in reqs if _norm(re.split(r"[=<>!~ \[]", r)[0]) in SDIST_ONLY]
    return [r for r in reqs if r not in sdists], sdists


def python_args(python: str) -> list[str]:
    """pip's target-interpreter options for CPython ``python`` ("3.9")."""
    abi = "cp" + python.replace(".", "")
    return ["--python-version", python, "--implementation", "cp", "--abi", abi]


def _download(reqs: list[str], dest: Path, *, deps: bool, py_args: list[str] = PY_ARGS,
              extra: tuple[str, ...] = ()) -> None:
    binary, sdists = _split(reqs)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    wheels, sources = dest / "wheels", dest / "sdist"
    _pip("download", "-q", *([] if deps else ["--no-deps"]), "--only-binary=:all:", *py_args,
         *plat, *extra, "-d", str(wheels), *binary)
    _pip("download", "-q", "--no-deps", "--no-binary=:all:", *extra, "-d", str(sources), *sdists)


def _pins(*folders: Path) -> list[str]:
    """``name==version`` of every wheel and sdist in ``folders``."""
    pins = []
    for f in sorted(p for folder in folders if folder.is_dir() for p in folder.iterdir()):
        m = re.match(r"(.+?)-(\d[^-]*?)(?:\.tar\.gz|-.*\.whl)$", f.name)
        if m:
            pins.append(f"{_norm(m.group(1))}=={m.group(2)}")
    return sorted(set(pins))


def lock() -> None:
    """Resolve requirements.in for the image's platform and write the pins to requirements.txt."""
    tmp = BUILD / "lock"
    shutil.rmtree(tmp, ignore_errors=True)
    reqs = [ln.split("#")[0].strip() for ln in (HERE / "requirements.in").read_text().splitlines()]
    _download([*(r for r in reqs if r), *BUILD_ONLY], tmp, deps=True)
    pins = _pins(tmp / "wheels", tmp / "sdist")
    header = "# Generated by `python docker/build.py --lock` from requirements.in. Do not edit.\n"
    (HERE / "requirements.txt").write_text(header + "\n".join(sorted(pins)) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"wrote {len(pins)} pins to {HERE / 'requirements.txt'}")


def input_hash(base_id: str) -> str:
    h = hashlib.sha256(base_id.encode())
    for name in (*CONTEXT_FILES, "Dockerfile", "build.py"):
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:12]


def build(*, base_image: str | None, force: bool) -> str:
    """Build (or reuse) the image; return its hash tag."""
    start = time.monotonic()
    if base_image is None:
        base_image = DEFAULT_BASE
        subprocess.run(["bash", str(HERE / "build-base.sh"), base_image], check=True)
    base_id = _image_id(base_image) or base_image  # a Hub name not pulled yet: hash the name
    tag = f"{REPO}:{input_hash(base_id)}"
    if not force and _image_id(tag):
        _docker("tag", tag, f"{REPO}:latest")
        print(f"image: {tag} is up to date (tagged {REPO}:latest); nothing to build")
        return tag
    BUILD.mkdir(exist_ok=True)
    for sub in ("wheels", "sdist"):
        shutil.rmtree(BUILD / sub, ignore_errors=True)
    _download(_requirements(), BUILD, deps=False)
    for name in CONTEXT_FILES:
        shutil.copy2(HERE / name, BUILD / name)
    ca = BUILD / "ca-certificates.crt"
    if CA_BUNDLE.is_file():
        shutil.copyfile(CA_BUNDLE, ca)
    else:
        ca.write_text("")
    print(f"image: downloads done in {time.monotonic() - start:.0f}s; docker build {tag}",
          flush=True)
    cmd = ["build", "--force-rm", "--build-arg", f"BASE_IMAGE={base_image}",
           "-f", str(HERE / "Dockerfile"), "-t", tag, "-t", f"{REPO}:latest",
           "--label", f"sagemaker-emulator.inputs={tag}", str(BUILD)]
    if _docker(*cmd).returncode != 0:
        raise SystemExit(f"image: docker build failed for {tag}")
    size = _docker("image", "inspect", "-f", "{{.Size}}", tag, capture=True).stdout.strip()
    print(f"image: built {tag} (+ {REPO}:latest) in {time.monotonic() - start:.0f}s, "
          f"size {int(size) / 1e6:.0f} MB")
    return tag


# ---- framework family images (emulator/job/frameworks.py) -------------------------------------------
#: Minutes a cold build takes on the 2-core CI machine, for the estimate shown before a build:
#: measured for torch 1.12 (base 130 s, image 925 s with the machine shared, load ~9); families
#: with nvidia-* wheels download and unpack ~3 GB more (not measured: an estimate).
ESTIMATE_MIN = {"base": 2, "plain": 15, "cuda_wheels": 25}
#: Debian packages an image of that suite needs besides the Dockerfile's (bullseye's pip on
#: Python 3.9 imports distutils, packaged separately there).
SUITE_PACKAGES = {"bullseye": ("python3-distutils",)}
#: Lines of requirements.in that are the default image's own (the family decides these).
_FAMILY_OWNED = {"torch", "sagemaker-training", "sagemaker-pytorch-training"}


def _frameworks():  # type: ignore[no-untyped-def]
    """emulator.job.frameworks, importable without installing the project."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    from emulator.job import frameworks

    return frameworks


def family_requirements(fam) -> list[str]:  # type: ignore[no-untyped-def]
    """requirements.in of a family image: its torch and toolkits, the toolkits' other
    dependencies (shared with the default image), and a current pip."""
    shared = [r for r in (ln.split("#")[0].strip()
                          for ln in (HERE / "requirements.in").read_text().splitlines())
              if r and _norm(re.split(r"[=<>!~ \[]", r)[0]) not in _FAMILY_OWNED]
    return [fam.requirement, f"sagemaker-training=={fam.toolkit[0]}",
            f"sagemaker-pytorch-training=={fam.toolkit[1]}", *shared, "pip"]


def base_tag(suite: str) -> str:
    return f"sagemaker-emulator-base:{suite}"


def family_hash(fam, base_id: str) -> str:  # type: ignore[no-untyped-def]
    """Hash of a family image's inputs: the base, the family record, the requirements,
    Dockerfile, this script and the context files (not the resolved pins: resolved at build)."""
    h = hashlib.sha256(base_id.encode())
    h.update(repr(fam).encode())
    h.update("\n".join(family_requirements(fam)).encode())
    for name in ("entrypoint.sh", "Dockerfile", "build.py"):
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    return h.hexdigest()[:12]


def family_tag(fam, base_image: str | None = None) -> str | None:  # type: ignore[no-untyped-def]
    """The tag of ``fam``'s image for the current inputs, or None when its base is not built."""
    base_id = _image_id(base_image or base_tag(fam.suite)) or base_image
    if base_id is None:
        return None
    return f"{REPO}:{fam.tag_name}-{family_hash(fam, base_id)}"


def estimate(fam, base_image: str | None = None) -> int:  # type: ignore[no-untyped-def]
    """Minutes a cold build of ``fam``'s image takes here (for the progress line)."""
    # From torch 1.13 on, PyPI's CUDA builds pull the nvidia-* wheels (1.12 has CUDA inside).
    nvidia = fam.cuda_wheels and tuple(int(x) for x in fam.torch.split(".")[:2]) >= (1, 13)
    minutes = ESTIMATE_MIN["cuda_wheels" if nvidia else "plain"]
    if base_image is None and _image_id(base_tag(fam.suite)) is None:
        minutes += ESTIMATE_MIN["base"]
    return minutes


def _refresh(folder: Path) -> Path:
    """Move ``folder``'s files aside (returned; merged with what an interrupted build left there)
    so pip fills an empty folder, copying what it can from there instead of downloading it."""
    old = folder.with_name(folder.name + ".old")
    old.mkdir(parents=True, exist_ok=True)
    if folder.is_dir():
        for f in folder.iterdir():
            f.replace(old / f.name)
        folder.rmdir()
    folder.mkdir(parents=True)
    return old


#: Resolves requirements.in with the base image's own python3 (so environment markers are the
#: image's: pip's --python-version does not change them) and writes pip's report (the files and
#: their sha256). Wheels only (as the image's glibc takes them), except the packages published
#: only as sources; the context's earlier downloads serve as find-links (torch 1.12 has no
#: separate metadata on PyPI: pip would download the 776 MB wheel again just to read it).
_RESOLVE = """set -e
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
python3 -m venv /tmp/v
/tmp/v/bin/pip install -q --disable-pip-version-check --upgrade -c /ctx/constraints.in pip
mkdir -p /ctx/wheels
/tmp/v/bin/pip install -q --disable-pip-version-check --dry-run --ignore-installed \
    --only-binary=:all: --no-binary={sdists} --find-links /ctx/wheels \
    --report /ctx/report.json -c /ctx/constraints.in -r /ctx/requirements.in -r /ctx/build-only.in
chown {owner} /ctx/report.json
"""


def _resolve_in(base: str, ctx: Path) -> dict[str, Artifact]:
    """``{name==version: Artifact}`` of ctx/requirements.in (+ build-only.in) for ``base``'s
    Python: the exact files the image's pip chose (its glibc takes manylinux tags the host's
    ``pip download --platform`` list would have to guess), with the hashes from pip's report."""
    name = f"sm-emulator-resolve-{os.getpid()}"
    # The host's CA bundle, as for the image (a TLS-inspecting proxy's CA may be in it).
    ca = ["-v", f"{CA_BUNDLE}:/tmp/host-ca.crt:ro", "-e", "PIP_CERT=/tmp/host-ca.crt"] \
        if CA_BUNDLE.is_file() else []
    try:
        done = _docker("run", "--rm", "--name", name, "--network", "bridge", "-v", f"{ctx}:/ctx", *ca,
                       "--label", "sagemaker-emulator.helper=build", base, "bash", "-c",
                       _RESOLVE.format(owner=f"{os.getuid()}:{os.getgid()}",
                                       sdists=",".join(sorted(SDIST_ONLY))))
    finally:
        _docker("rm", "-f", name, capture=True)
    if done.returncode != 0:
        raise SystemExit(f"image: resolving the requirements in {base} failed")
    return artifacts(json.loads((ctx / "report.json").read_text()))


@dataclass(frozen=True)
class Artifact:
    """One file pip's resolver chose: where it is and the sha256 pip's report gives for it
    (``None`` only for a local file pip found by ``--find-links`` without a hash)."""

    url: str
    sha256: str | None

    @property
    def name(self) -> str:
        return unquote(Path(urlsplit(self.url).path).name)


def artifacts(report: dict[str, Any]) -> dict[str, Artifact]:
    """``{name==version: Artifact}`` of a pip ``install --dry-run --report`` (format 1): every
    file pip would install, with the sha256 of ``download_info.archive_info`` (``hashes`` or the
    older ``hash = "sha256=…"``). A remote file without a sha256 is refused: it could not be checked."""
    out = {}
    for item in report["install"]:
        info = item["download_info"]
        archive = info.get("archive_info", {})
        sha = archive.get("hashes", {}).get("sha256")
        if sha is None and str(archive.get("hash", "")).startswith("sha256="):
            sha = archive["hash"].split("=", 1)[1]
        if sha is None and not info["url"].startswith("file://"):
            raise SystemExit(f"image: pip's report gives no sha256 for {info['url']}; refusing to fetch it")
        out[f"{_norm(item['metadata']['name'])}=={item['metadata']['version']}"] = Artifact(info["url"], sha)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _ssl_context() -> ssl.SSLContext:
    """TLS as pip has it here: pip's certificate bundle when one is configured, else this
    machine's CA bundle (a TLS-inspecting proxy's CA may be in it), else Python's defaults."""
    cafile = os.environ.get("PIP_CERT") or (str(CA_BUNDLE) if CA_BUNDLE.is_file() else None)
    return ssl.create_default_context(cafile=cafile)


#: Attempts per file (a dropped connection is retried; a hash mismatch is not).
FETCH_ATTEMPTS = 3
#: Files larger than this get a progress line of their own.
BIG_FILE = 20e6


def _download_file(art: Artifact, dest: Path, say: Callable[[str], None]) -> None:
    """Download ``art`` to ``dest`` through a ``.part`` file, checking its sha256 as it streams;
    the file appears only when it is complete and matches. Proxies come from the environment
    (``https_proxy``…), as for pip."""
    part = dest.with_name(dest.name + ".part")
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        h, size = hashlib.sha256(), 0
        try:
            with urllib.request.urlopen(art.url, timeout=120, context=_ssl_context()) as resp, \
                    open(part, "wb") as out:
                total = int(resp.headers.get("Content-Length") or 0)
                if total > BIG_FILE:  # the small ones go by quietly
                    say(f"image: fetching {art.name} ({total / 1e6:.0f} MB)")
                for block in iter(lambda: resp.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
                    size += len(block)
        except OSError as exc:  # URLError, a reset or a timeout: try again
            part.unlink(missing_ok=True)
            if attempt == FETCH_ATTEMPTS:
                raise SystemExit(f"image: could not fetch {art.url}: {exc}") from exc
            time.sleep(2 * attempt)
            continue
        if art.sha256 is not None and h.hexdigest() != art.sha256:
            part.unlink(missing_ok=True)
            raise SystemExit(f"image: {art.name}: sha256 {h.hexdigest()} does not match "
                             f"{art.sha256} from pip's report ({size} bytes from {art.url}); "
                             "stopping the build")
        part.replace(dest)
        return


def _fetch(arts: list[Artifact], dest: Path, old: Path, say: Callable[[str], None] = print) -> None:
    """Put exactly the files pip's resolver reported into ``dest``: from ``old`` when an earlier
    build downloaded them and the hash still matches, else downloaded as files (never with this
    machine's pip, whose Python need not be the image's: pip refuses a cp39 wheel on 3.11).
    Any hash mismatch stops the build (``SystemExit``)."""
    dest.mkdir(parents=True, exist_ok=True)
    for art in arts:
        target = dest / art.name
        kept = old / art.name
        if kept.is_file() and art.sha256 in (None, _sha256(kept)):
            kept.replace(target)
        elif art.url.startswith("file://") and not art.url.startswith("file:///ctx/"):
            shutil.copyfile(unquote(urlsplit(art.url).path), target)
            if art.sha256 is not None and _sha256(target) != art.sha256:
                target.unlink()
                raise SystemExit(f"image: {art.name}: sha256 does not match pip's report; stopping the build")
        elif art.url.startswith("file://"):
            raise SystemExit(f"image: {art.name} was found in an earlier build's downloads, which "
                             f"are gone; run the build again")
        else:
            _download_file(art, target, say)


def build_family(framework: str, *, base_image: str | None, force: bool,
                 say: Callable[[str], None] = print) -> str:
    """Build (or reuse) the image of the family that ``framework`` names; return its tag."""
    fw = _frameworks()
    fam = fw.family(framework)
    start = time.monotonic()
    if base_image is None:
        subprocess.run(["bash", str(HERE / "build-base.sh"), base_tag(fam.suite), fam.suite],
                       check=True)
    tag = family_tag(fam, base_image)
    assert tag is not None
    if not force and _image_id(tag):
        say(f"image: {tag} is up to date; nothing to build")
        return tag
    say(f"image: building the torch {fam.name} image {tag} (≈ {estimate(fam, base_image)} min, once)")
    ctx = BUILD / fam.tag_name
    ctx.mkdir(parents=True, exist_ok=True)
    reqs = family_requirements(fam)
    (ctx / "requirements.in").write_text("\n".join(reqs) + "\n")
    (ctx / "build-only.in").write_text("\n".join(BUILD_ONLY) + "\n")
    (ctx / "constraints.in").write_text("\n".join(fam.constraints) + "\n")
    files = _resolve_in(base_image or base_tag(fam.suite), ctx)
    pins = sorted(files)
    say(f"image: {len(pins)} pins resolved with the image's Python {fam.python}")
    olds = [_refresh(ctx / "wheels"), _refresh(ctx / "sdist")]
    arts = list(files.values())
    _fetch([a for a in arts if a.name.endswith(".whl")], ctx / "wheels", olds[0], say)
    _fetch([a for a in arts if not a.name.endswith(".whl")], ctx / "sdist", olds[1], say)
    for old in olds:
        shutil.rmtree(old, ignore_errors=True)
    (ctx / "requirements.txt").write_text("# Resolved by docker/build.py --framework "
                                          f"{fam.name}.\n" + "\n".join(pins) + "\n")
    shutil.copy2(HERE / "entrypoint.sh", ctx / "entrypoint.sh")
    ca = ctx / "ca-certificates.crt"
    if CA_BUNDLE.is_file():
        shutil.copyfile(CA_BUNDLE, ca)
    else:
        ca.write_text("")
    say(f"image: downloads done in {time.monotonic() - start:.0f}s; docker build {tag}")
    cmd = ["build", "--force-rm", "--build-arg", f"BASE_IMAGE={base_image or base_tag(fam.suite)}",
           "--build-arg", "CHECK_IMPORTS=torch, mpi4py.MPI, sagemaker_training",
           "--build-arg", f"EXTRA_PACKAGES={' '.join(SUITE_PACKAGES.get(fam.suite, ()))}",
           "-f", str(HERE / "Dockerfile"), "-t", tag,
           "--label", f"sagemaker-emulator.inputs={tag}",
           "--label", f"sagemaker-emulator.framework={fam.name}",
           "--label", f"sagemaker-emulator.torch={fam.torch}",
           "--label", f"sagemaker-emulator.python={fam.python}", str(ctx)]
    if _docker(*cmd).returncode != 0:
        raise SystemExit(f"image: docker build failed for {tag}")
    size = _docker("image", "inspect", "-f", "{{.Size}}", tag, capture=True).stdout.strip()
    say(f"image: built {tag} in {time.monotonic() - start:.0f}s, size {int(size) / 1e6:.0f} MB")
    return tag


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-image", help="build FROM this image instead of the debootstrap base "
                   "(e.g. debian:bookworm-slim where Docker Hub is reachable)")
    p.add_argument("--force", action="store_true", help="rebuild even if the hash tag exists")
    p.add_argument("--lock", action="store_true", help="re-resolve requirements.txt and exit")
    p.add_argument("--framework", help="build the image of this DLC family or version (1.12, "
                   "2.0.1, ...; see emulator/job/frameworks.py) instead of the default image")
    p.add_argument("--print-tag", action="store_true", help="with --framework: print the tag "
                   "the current inputs give (empty if the base is not built) and exit")
    args = p.parse_args(argv)
    if args.framework and args.print_tag:
        print(family_tag(_frameworks().family(args.framework), args.base_image) or "")
        return
    if shutil.which("docker") is None and not args.lock:
        raise SystemExit("image: the docker CLI is missing (apt-get install docker.io)")
    if args.lock:
        lock()
        return
    os.chdir(HERE.parent)
    if args.framework:
        build_family(args.framework, base_image=args.base_image, force=args.force)
        return
    build(base_image=args.base_image, force=args.force)


if __name__ == "__main__":
    main()
