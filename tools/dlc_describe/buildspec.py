"""The YAML subset of AWS's buildspecs and image configs, and the images a buildspec names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


def _yaml_scalar(text: str, anchors: dict[str, str]) -> str:
    """A scalar: quotes removed, ``*alias`` replaced by its anchor's value."""
    text = text.strip()
    if text.startswith("*"):
        return anchors.get(text[1:].strip(), "")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _split_flow(items: str) -> list[str]:
    """The items of a flow list's inside, split at commas outside quotes."""
    out, cur, quote = [], "", ""
    for c in items:
        if quote:
            cur += c
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
            cur += c
        elif c == ",":
            out.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        out.append(cur)
    return out


def parse_yaml_mapping(text: str) -> dict[str, Any]:
    """The subset of YAML AWS's buildspecs and image configs use: nested mappings by indentation,
    scalars, ``&anchor``/``*alias`` (an alias is the most recent anchor of that name), ``!join [..]``
    flow lists possibly spanning lines, comments. Sequences and merge keys (``<<``) are ignored."""
    anchors: dict[str, str] = {}
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#") or raw.lstrip().startswith("- "):
            continue
        m = re.match(r"^(\s*)([^\s:#][^:]*?)\s*:(?:\s+(.*))?$", raw)
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2).strip().strip("'\""), (m.group(3) or "").strip()
        qm = re.match(r"""^(&\S+\s+)?("[^"]*"|'[^']*')\s*(#.*)?$""", value)
        if qm:
            value = (qm.group(1) or "") + qm.group(2)
        elif value:
            value = re.sub(r"\s+#.*$", "", value)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        anchor = ""
        am = re.match(r"^&(\S+)\s*(.*)$", value)
        if am:
            anchor, value = am.group(1), am.group(2).strip()
        if key == "<<":
            continue
        if not value:
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
            continue
        if value.startswith("!join"):
            body = value[len("!join"):].strip()
            while body.count("[") > body.count("]") and i < len(lines):
                body += " " + lines[i].strip()
                i += 1
            inner = body.strip()[1:-1]
            result = "".join(_yaml_scalar(x, anchors) for x in _split_flow(inner))
        else:
            result = _yaml_scalar(value, anchors)
        parent[key] = result
        if anchor:
            anchors[anchor] = result
    return root


@dataclass
class BuildspecImage:
    """One image a buildspec builds (the keys read from its ``images:`` entry)."""

    key: str
    device: str
    target: str
    docker_file: str  # relative to the buildspec's folder
    cuda: str
    latest_release: bool
    transformers_version: str
    datasets_version: str
    tag: str


@dataclass
class Buildspec:
    """A buildspec's framework version, short version, architecture and images."""

    version: str
    short_version: str
    arch_type: str
    images: list[BuildspecImage]


def parse_buildspec(text: str) -> Buildspec:
    """The version, architecture and images of a ``buildspec*.yml``."""
    data = parse_yaml_mapping(text)
    images: list[BuildspecImage] = []
    for key, img in (data.get("images") or {}).items():
        if not isinstance(img, dict):
            continue
        images.append(BuildspecImage(
            key, str(img.get("device_type", "")), str(img.get("target", "")), str(img.get("docker_file", "")),
            str(img.get("cuda_version", "")), "latest_release_tag" in img, str(img.get("transformers_version", "")),
            str(img.get("datasets_version", "")), str(img.get("tag", ""))))
    return Buildspec(str(data.get("version", "")), str(data.get("short_version", "")),
                     str(data.get("arch_type", "")), images)
