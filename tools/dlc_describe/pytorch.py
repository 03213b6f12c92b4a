"""The SageMaker PyTorch training images: 1.12-2.10 from the buildspecs and Dockerfiles of AWS's ``master``,
2.11+ from the image configs, Dockerfiles, ``pyproject.toml`` and ``uv.lock`` of AWS's ``main``."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

import tomllib

from .buildspec import Buildspec, BuildspecImage, parse_buildspec, parse_yaml_mapping
from .dockerfile import cuda_from_image, root_image, stage_closure
from .gitrepo import Git
from .images import Report, describe_dockerfile, image_record
from .names import version_tuple
from .uvlock import lock_closure, locked_packages

LEGACY_FAMILIES = (1, 12), (2, 10)


def _legacy_candidates(git: Git, commit: str) -> dict[tuple[str, str], list[tuple[BuildspecImage, Buildspec, str]]]:
    """The SageMaker images of every x86 ``pytorch/training/buildspec*.yml``, by (short version, device)."""
    found: dict[tuple[str, str], list[tuple[BuildspecImage, Buildspec, str]]] = {}
    for path in git.ls(commit, "pytorch/training"):
        if path.count("/") != 2 or not re.fullmatch(r"buildspec[^/]*\.yml", posixpath.basename(path)):
            continue
        text = git.show(commit, path) or ""
        bs = parse_buildspec(text)
        for img, spec in _sagemaker_images(bs):
            found.setdefault((spec.short_version, img.device), []).append((img, spec, path))
    return found


def _sagemaker_images(bs: Buildspec) -> list[tuple[BuildspecImage, Buildspec]]:
    """A buildspec's x86 ``target: sagemaker`` images built from ``Dockerfile.cpu``/``Dockerfile.gpu``."""
    if bs.arch_type and bs.arch_type != "x86":
        return []
    return [(img, bs) for img in bs.images
            if img.target == "sagemaker" and img.device in ("cpu", "gpu")
            and posixpath.basename(img.docker_file) == f"Dockerfile.{img.device}"]


def pick_image(cands: list[tuple[BuildspecImage, Buildspec, str]]) -> tuple[BuildspecImage, Buildspec, str]:
    """Of several images for one version and device: ``latest_release_tag``, then the highest CUDA."""
    return sorted(cands, key=lambda c: (c[0].latest_release, version_tuple(c[0].cuda.replace("cu", "")), c[2]))[-1]


def legacy_images(git: Git, commit: str, report: Report) -> list[dict[str, Any]]:
    """The PyTorch 1.12-2.10 images at ``commit`` (AWS's ``master``)."""
    cands = _legacy_candidates(git, commit)
    families = sorted({fam for fam, _ in cands if LEGACY_FAMILIES[0] <= version_tuple(fam) <= LEGACY_FAMILIES[1]},
                      key=version_tuple)
    images: list[dict[str, Any]] = []
    for fam in families:
        for device in ("cpu", "gpu"):
            chosen = cands.get((fam, device))
            if not chosen:
                hist = _legacy_history(git, commit, fam, device, cands)
                if hist is None:
                    report.missing.append(f"pytorch-{fam}-{device}: no SageMaker image in any buildspec")
                    continue
                chosen = [hist[0]]
                report.notes.append(f"pytorch-{fam}-{device}: commented out in the buildspec at {commit[:10]}; "
                                    f"{hist[0][2]} names it at {hist[1][:10]} (Dockerfile read at {commit[:10]})")
            img, bs, bs_path = pick_image(chosen)
            if len(chosen) > 1:
                others = sorted({c[0].cuda or c[0].device for c in chosen} - {img.cuda or img.device})
                if others:
                    report.notes.append(f"pytorch-{fam}-{device}: also built for {', '.join(others)}; "
                                        f"took {img.cuda} ({'latest_release_tag' if img.latest_release else 'newest'})")
            path = posixpath.normpath(posixpath.join(posixpath.dirname(bs_path), img.docker_file))
            text = git.show(commit, path)
            if text is None:
                report.missing.append(f"pytorch-{fam}-{device}: {path} absent at {commit[:10]}")
                continue
            df, _, packages, uninstalled = describe_dockerfile(text, img.target, {}, report,
                                                               f"pytorch-{fam}-{device} {path}")
            closure = stage_closure(df, img.target)
            python = df.global_args.get("PYTHON_VERSION") or None
            cuda = None
            if device == "gpu":
                cuda = cuda_from_image(root_image(df, closure[-1])) or df.global_args.get("CUDA_VERSION")
                if cuda and img.cuda and img.cuda != "cu" + "".join(cuda.split(".")[:2]):
                    report.notes.append(f"pytorch-{fam}-{device}: CUDA {cuda} in a {img.cuda} folder")
            torch = next((p for p in packages if p.name == "torch"), None)
            if torch and torch.version and torch.version.split("+")[0] != bs.version:
                report.notes.append(f"pytorch-{fam}-{device}: buildspec version {bs.version}, torch {torch.version}")
            images.append(image_record(
                id=f"pytorch-{fam}-{device}", flavour="pytorch", family=fam, framework_version=bs.version,
                transformers_version=None, device=device, python=python, cuda=cuda, base=None, base_tag=None,
                source={"commit": commit, "path": path}, date=git.last_change(commit, [path]),
                packages=[p.as_json() for p in packages], uninstalled=uninstalled))
    return images


def _legacy_history(git: Git, commit: str, fam: str, device: str,
                    cands: Mapping[tuple[str, str], list[tuple[BuildspecImage, Buildspec, str]]]
                    ) -> tuple[tuple[BuildspecImage, Buildspec, str], str] | None:
    """The newest commit whose buildspecs of ``fam`` still name a ``device`` SageMaker image."""
    paths = sorted({path for (f, _), lst in cands.items() if f == fam for _, _, path in lst})
    for c in git.log(commit, paths):
        for path in paths:
            text = git.show(c, path)
            if text is None:
                continue
            bs = parse_buildspec(text)
            picks = [(img, spec, path) for img, spec in _sagemaker_images(bs) if img.device == device]
            if picks:
                return pick_image(picks), c
    return None


def current_images(git: Git, commit: str, report: Report) -> list[dict[str, Any]]:
    """The PyTorch 2.11+ images at ``commit`` (AWS's ``main``)."""
    images: list[dict[str, Any]] = []
    configs = [p for p in git.ls(commit, ".github/config/image/pytorch")
               if re.fullmatch(r"[\d.]+-sagemaker-(cpu|cuda)\.yml", posixpath.basename(p))]
    for cfg_path in configs:
        cfg = parse_yaml_mapping(git.show(commit, cfg_path) or "")
        meta, build = cfg.get("metadata", {}), cfg.get("build", {})
        device = str(meta.get("device_type"))
        version = str(meta.get("framework_version"))
        fam = ".".join(version.split(".")[:2])
        dockerfile_path, target = str(build.get("dockerfile")), str(build.get("target"))
        build_args = {k.upper(): str(v) for k, v in build.items() if k not in ("dockerfile", "target")}
        build_args["FRAMEWORK_SHORT_VERSION"] = fam
        text = git.show(commit, dockerfile_path)
        if text is None:
            report.missing.append(f"pytorch-{fam}-{device}: {dockerfile_path} absent")
            continue
        df, events, dpackages, uninstalled = describe_dockerfile(text, target, build_args, report,
                                                                 f"pytorch-{fam}-{device} {dockerfile_path}")
        syncs = [ev for ev in events if ev.kind == "uv-sync"]
        extras = sorted({x for ev in syncs for x in ev.names})
        projects = sorted({ev.text for ev in syncs if ev.text})
        if len(projects) != 1:
            raise ValueError(f"{dockerfile_path}: expected one pyproject.toml, found {projects}")
        project_path = projects[0]
        pyproject = tomllib.loads(git.show(commit, project_path) or "")
        lock_path = posixpath.join(posixpath.dirname(project_path), "uv.lock")
        lock_text = git.show(commit, lock_path) or ""
        python = str(df.global_args.get("PYTHON_VERSION") or "")
        upackages, notes = locked_packages(lock_text, pyproject["project"]["name"], extras, python)
        report.notes.extend(f"{project_path}: {n}" for n in notes)
        locked, notes = lock_closure(lock_text, pyproject["project"]["name"], extras, python)
        report.notes.extend(f"{lock_path}: {n}" for n in notes)
        merged = {p.name: p for p in upackages}
        for p in dpackages:  # installs in the Dockerfile come after uv sync's environment
            merged[p.name] = p
        cuda = None
        if device == "gpu":
            closure = stage_closure(df, target)
            cuda = cuda_from_image(root_image(df, closure[-1])) or build_args.get("CUDA_VERSION")
        torch = merged.get("torch")
        if torch and torch.version and torch.version.split("+")[0] != version:
            report.notes.append(f"pytorch-{fam}-{device}: config {version}, locked torch {torch.version}")
        images.append(image_record(
            id=f"pytorch-{fam}-{device}", flavour="pytorch", family=fam, framework_version=version,
            transformers_version=None, device=device, python=python, cuda=cuda, base=None, base_tag=None,
            source={"commit": commit, "path": dockerfile_path},
            date=git.last_change(commit, [dockerfile_path, project_path, lock_path, cfg_path]),
            packages=[merged[k].as_json() for k in sorted(merged)], locked=locked, uninstalled=uninstalled))
    return images
