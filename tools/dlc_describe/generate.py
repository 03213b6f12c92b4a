"""Assemble every image, write the JSON and the report (the command line)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from . import __doc__ as PACKAGE_DOC
from .gitrepo import Git
from .huggingface import huggingface_images
from .images import Report
from .names import version_tuple
from .pytorch import current_images, legacy_images

LEGACY_COMMIT = "f06ada0e08ec0be1627f201691856eb8c28abd17"
CURRENT_COMMIT = "e0ecedea6a1c56d6b5914f9cfb2fec5c548e67e0"
REPO_NAME = "aws/deep-learning-containers"
DEFAULT_OUT = "emulator/job/dlc_images.json"


def generate(repo: str, legacy: str, current: str, sdk_json: Mapping[str, Any]) -> tuple[dict[str, Any], Report]:
    """Every image (PyTorch, then Hugging Face), sorted, with the commits read, and the report."""
    git = Git(repo)
    legacy_full, current_full = git.rev(legacy), git.rev(current)
    report = Report()
    pt = legacy_images(git, legacy_full, report) + current_images(git, current_full, report)
    hf = huggingface_images(git, legacy_full, sdk_json, pt, report)
    images = sorted(pt, key=lambda i: (version_tuple(i["family"]), i["device"])) + sorted(
        hf, key=lambda i: (version_tuple(i["transformers_version"]), version_tuple(i["family"])))
    data = {"sources": {"legacy": {"repo": REPO_NAME, "commit": legacy_full},
                        "current": {"repo": REPO_NAME, "commit": current_full}},
            "images": images}
    return data, report


def dumps(data: Mapping[str, Any]) -> str:
    """The JSON text written (one-space indent, sorted keys, final newline)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def default_sdk_json() -> str | None:
    """The installed SageMaker SDK's ``image_uri_config/huggingface.json``, if any."""
    import importlib.util

    spec = importlib.util.find_spec("sagemaker")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "image_uri_config", "huggingface.json")
    return path if os.path.exists(path) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Write the JSON and print the images, what was not found, the notes and the skipped conda names."""
    ap = argparse.ArgumentParser(prog="python -m tools.dlc_describe",
                                 description=PACKAGE_DOC.split("\n\n")[0] if PACKAGE_DOC else None)
    ap.add_argument("--repo", required=True, help="checkout or bare mirror of aws/deep-learning-containers")
    ap.add_argument("--legacy", default=LEGACY_COMMIT, help="commit for PyTorch 1.12-2.10 and Hugging Face")
    ap.add_argument("--current", default=CURRENT_COMMIT, help="commit for PyTorch 2.11+")
    ap.add_argument("--sdk-huggingface-json", default=None,
                    help="the SageMaker SDK's image_uri_config/huggingface.json (default: the installed SDK's)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ns = ap.parse_args(argv)
    sdk_path = ns.sdk_huggingface_json or default_sdk_json()
    if not sdk_path:
        ap.error("no --sdk-huggingface-json and no installed sagemaker SDK")
    with open(sdk_path, encoding="utf-8") as fh:
        sdk_json = json.load(fh)
    data, report = generate(ns.repo, ns.legacy, ns.current, sdk_json)
    text = dumps(data)
    os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
    with open(ns.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {ns.out}: {len(data['images'])} images")
    for img in data["images"]:
        print(f"  {img['id']:<40} python {img['python']:<8} packages {len(img['packages']):>3}  "
              f"{img['source']['path']}@{img['source']['commit'][:10]}")
    for title, items in (("missing images", report.missing), ("Hugging Face versions not found", report.hf_not_found),
                         ("Hugging Face versions out of scope (no PyTorch 1.12+ image)", report.hf_out_of_scope),
                         ("notes", report.notes)):
        if items:
            print(f"{title}:")
            for item in items:
                print(f"  {item}")
    if report.skipped_conda:
        print("conda packages skipped (no Python distribution):")
        for name in sorted(report.skipped_conda):
            print(f"  {name}: {report.skipped_conda[name]}")
    return 0
