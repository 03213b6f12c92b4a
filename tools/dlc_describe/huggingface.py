"""The SageMaker Hugging Face PyTorch training images the SDK names, found in AWS's files or their history."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .buildspec import parse_buildspec
from .dockerfile import arg_default, cuda_from_image, last_stage_name, parse_dockerfile, root_image
from .gitrepo import Git
from .images import Report, describe_dockerfile, image_record
from .names import version_tuple
from .pytorch import LEGACY_FAMILIES


def sdk_training_versions(sdk_json: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(transformers version, torch version) pairs of the SDK's Hugging Face training images."""
    out: list[tuple[str, str]] = []
    for tv, entry in (sdk_json.get("training", {}).get("versions", {}) or {}).items():
        for key in entry:
            m = re.fullmatch(r"pytorch(\d+\.\d+\.\d+)", key)
            if m:
                out.append((tv, m.group(1)))
    return sorted(out, key=lambda x: (version_tuple(x[0]), version_tuple(x[1])))


_HF_DIR = "huggingface/pytorch/training"


@dataclass
class HfSource:
    """Where an HF image is described: the commit, its Dockerfile, the build arguments passed and the buildspec
    that names it (``None`` when found by the Dockerfile's own ``ARG TRANSFORMERS_VERSION`` and ``FROM`` tag)."""

    commit: str
    dockerfile: str
    build_args: dict[str, str]
    buildspec: str | None = None


def _hf_at(git: Git, commit: str, tv: str, torch: str) -> HfSource | None:
    """The HF image for (transformers ``tv``, torch ``torch``) in the files at ``commit``."""
    paths = git.ls(commit, _HF_DIR)
    for path in paths:
        if path.count("/") != 3 or not re.fullmatch(r"buildspec[^/]*\.yml", posixpath.basename(path)):
            continue
        bs = parse_buildspec(git.show(commit, path) or "")
        if bs.version != torch:
            continue
        for img in bs.images:
            if img.transformers_version == tv and posixpath.basename(img.docker_file) == "Dockerfile.gpu":
                df_path = posixpath.normpath(posixpath.join(_HF_DIR, img.docker_file))
                args = {"TRANSFORMERS_VERSION": tv}
                if img.datasets_version:
                    args["DATASETS_VERSION"] = img.datasets_version
                return HfSource(commit, df_path, args, path)
    for path in paths:
        if not re.fullmatch(rf"{_HF_DIR}/docker/[\d.]+/py3/cu\d+/Dockerfile\.gpu", path):
            continue
        text = git.show(commit, path) or ""
        df = parse_dockerfile(text)
        tag = df.stages[-1].base if df.stages else ""
        m = re.search(r"pytorch-training:(\d+\.\d+\.\d+)-gpu", tag)
        if m and m.group(1) == torch and arg_default(text, "TRANSFORMERS_VERSION") == tv:
            return HfSource(commit, path, {})
    return None


def find_hf_source(git: Git, commit: str, tv: str, torch: str) -> HfSource | None:
    """The HF image at ``commit``, else the newest commit in the folder's history that has it."""
    found = _hf_at(git, commit, tv, torch)
    if found:
        return found
    seen: set[str] = set()
    commits: list[str] = []
    for needle in (f"TRANSFORMERS_VERSION {tv}", f"TRANSFORMERS_VERSION={tv}"):
        for c in git.log(commit, [_HF_DIR], needle):
            if c not in seen:
                seen.add(c)
                commits.append(c)
    # newest first: a commit that still has it, else the parent of the one that replaced it
    order = {c: i for i, c in enumerate(git.log(commit, [_HF_DIR]))}
    for c in sorted(commits, key=lambda x: order.get(x, 1 << 30)):
        for cand in (c, git.parent(c)):
            if cand:
                found = _hf_at(git, cand, tv, torch)
                if found:
                    return found
    return None


def huggingface_images(git: Git, commit: str, sdk_json: Mapping[str, Any], pytorch: Sequence[Mapping[str, Any]],
                       report: Report) -> list[dict[str, Any]]:
    """The Hugging Face images the SDK names, each related to the PyTorch image it is built on."""
    by_id = {img["id"]: img for img in pytorch}
    images: list[dict[str, Any]] = []
    for tv, torch in sdk_training_versions(sdk_json):
        fam = ".".join(torch.split(".")[:2])
        if version_tuple(fam) < LEGACY_FAMILIES[0]:
            report.hf_out_of_scope.append(f"{tv} (pytorch {torch})")
            continue
        src = find_hf_source(git, commit, tv, torch)
        if src is None:
            report.hf_not_found.append(f"{tv} (pytorch {torch})")
            continue
        text = git.show(src.commit, src.dockerfile) or ""
        hf_id = f"huggingface-{tv}-pytorch-{fam}-gpu"
        df, _, packages, uninstalled = describe_dockerfile(text, last_stage_name(text), src.build_args, report,
                                                           f"{hf_id} {src.dockerfile}@{src.commit[:10]}")
        tag_full = df.stages[-1].base if df.stages else ""
        base_tag = tag_full.rsplit("/", 1)[-1]
        m = re.search(r":(\d+\.\d+\.\d+)-gpu-py(\d)(\d+)-(cu\d+)", base_tag)
        base_torch = m.group(1) if m else torch
        base_id = f"pytorch-{'.'.join(base_torch.split('.')[:2])}-gpu"
        base = by_id.get(base_id)
        if base is None:
            report.notes.append(f"huggingface {tv}: no PyTorch image {base_id}")
        py_short = f"{m.group(2)}.{m.group(3)}" if m else ""
        cuda_folder = m.group(4) if m else ""
        python: str | None = py_short or None
        cuda: str | None = None
        if base and base["cuda"] and "cu" + "".join(str(base["cuda"]).split(".")[:2]) == cuda_folder:
            cuda = base["cuda"]
            python = base["python"] if str(base["python"]).startswith(py_short) else python
        else:
            # FROM another CUDA build of that torch: read that PyTorch Dockerfile for python and CUDA
            other = git.show(commit, f"pytorch/training/docker/{'.'.join(base_torch.split('.')[:2])}/py3/"
                                     f"{cuda_folder}/Dockerfile.gpu")
            if other:
                odf = parse_dockerfile(other)
                cuda = cuda_from_image(root_image(odf, odf.stages[-1])) or odf.global_args.get("CUDA_VERSION")
                opy = odf.global_args.get("PYTHON_VERSION")
                python = opy if opy and opy.startswith(py_short) else python
            report.notes.append(f"huggingface {tv}: FROM {base_tag}, but {base_id} is "
                                f"{base['framework_version'] if base else '?'} {base['cuda'] if base else ''}")
        if base and base_torch != base["framework_version"]:
            report.notes.append(f"huggingface {tv}: FROM torch {base_torch}; {base_id} describes "
                                f"{base['framework_version']}")
        images.append(image_record(
            id=hf_id, flavour="huggingface", family=fam,
            framework_version=base_torch, transformers_version=tv, device="gpu", python=python, cuda=cuda,
            base=base_id if base else None, base_tag=base_tag,
            source={"commit": src.commit, "path": src.dockerfile},
            date=git.last_change(src.commit, [src.dockerfile, *([src.buildspec] if src.buildspec else [])]),
            packages=[p.as_json() for p in packages], uninstalled=uninstalled))
        if src.commit != commit:
            report.notes.append(f"huggingface {tv}: described at {src.commit[:10]} ({src.dockerfile})")
    return images


