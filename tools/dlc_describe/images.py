"""One image record, and what the generator reports besides the data."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .dockerfile import Dockerfile, dockerfile_events, parse_dockerfile
from .installs import Event, Package, apply_events


@dataclass
class Report:
    """What the generator says besides the data."""

    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hf_not_found: list[str] = field(default_factory=list)
    hf_out_of_scope: list[str] = field(default_factory=list)
    skipped_conda: dict[str, str] = field(default_factory=dict)


def image_record(**kw: Any) -> dict[str, Any]:
    """An image's JSON record: every key, ``None`` where not given."""
    keys = ("id", "flavour", "family", "framework_version", "transformers_version", "device", "python", "cuda",
            "base", "base_tag", "source", "date", "packages", "locked", "uninstalled")
    return {k: kw.get(k) for k in keys}


def describe_dockerfile(text: str, target: str, build_args: Mapping[str, str], report: Report, label: str
                        ) -> tuple[Dockerfile, list[Event], list[Package], list[str]]:
    """Parse a Dockerfile, read its target's events, report their notes and skipped conda names;
    return the Dockerfile, the events, the packages (sorted by name) and the names left uninstalled."""
    df = parse_dockerfile(text, build_args)
    events = dockerfile_events(df, target, build_args)
    for ev in events:
        if ev.kind == "note":
            m = re.match(r"conda (\S+) skipped: (.*)$", ev.text)
            if m:
                report.skipped_conda[m.group(1)] = m.group(2)
            else:
                report.notes.append(f"{label}:{ev.line}: {ev.text}")
    packages, uninstalled = apply_events(events)
    return df, events, [packages[k] for k in sorted(packages)], sorted(uninstalled)
