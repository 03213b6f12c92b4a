"""``uv.lock``: the versions a project's dependencies are locked to on Linux x86_64.

A lock entry's dependency (``{ name = "x", version = "1", source = {...}, marker = "...", extra = ["y"] }``) names
the lock entry ``x``; where the lock holds ``x`` more than once (one version per platform) the dependency carries
``version`` (and ``source``), else the entry whose ``resolution-markers`` hold is taken. A dependency whose
``marker`` does not hold on Linux x86_64 / the image's Python is not installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tomllib

from .installs import Package
from .markers import evaluate_marker, marker_environment
from .names import canonical_name

LockEntry = dict[str, Any]


def _project(pkgs: Sequence[LockEntry], project_name: str) -> LockEntry:
    root = next((p for p in pkgs if canonical_name(p["name"]) == canonical_name(project_name)), None)
    if root is None:
        raise ValueError(f"uv.lock has no entry for project {project_name}")
    return root


def _by_name(pkgs: Iterable[LockEntry]) -> dict[str, list[LockEntry]]:
    by_name: dict[str, list[LockEntry]] = {}
    for p in pkgs:
        by_name.setdefault(canonical_name(p["name"]), []).append(p)
    return by_name


def _synced_extras(root: LockEntry, extras: Iterable[str]) -> list[str]:
    """The project's extras ``uv sync --extra ...`` installs (``*``: ``--all-extras``), sorted."""
    wanted = set(extras)
    return [e for e in sorted(root.get("optional-dependencies", {})) if e in wanted or "*" in wanted]


def candidates(dep: Mapping[str, Any], by_name: Mapping[str, list[LockEntry]], env: Mapping[str, str]
               ) -> list[LockEntry]:
    """The lock entries a dependency can mean: those of its name, narrowed by its ``version``, its ``source``
    (unless none matches) and, if still several, by their ``resolution-markers`` in ``env``."""
    found = list(by_name.get(canonical_name(dep["name"]), []))
    if "version" in dep:
        found = [p for p in found if p.get("version") == dep["version"]]
    if "source" in dep:
        found = [p for p in found if p.get("source") == dep["source"]] or found
    if len(found) > 1:
        found = [p for p in found if any(evaluate_marker(m, env) for m in p.get("resolution-markers", []))] or found
    return found


def _resolved(dep: Mapping[str, Any], by_name: Mapping[str, list[LockEntry]], marker_env: Mapping[str, str],
              env: Mapping[str, str], notes: list[str], context: str = "") -> LockEntry | None:
    """The lock entry a dependency resolves to (its ``marker`` read in ``marker_env``), or None when
    its marker is false or the lock has none; more or fewer than one candidate is noted."""
    if dep.get("marker") and not evaluate_marker(dep["marker"], marker_env):
        return None
    found = candidates(dep, by_name, env)
    if len(found) != 1:
        notes.append(f"uv.lock: {len(found)} candidates for {canonical_name(dep['name'])}{context}")
    return found[0] if found else None


def locked_packages(lock_text: str, project_name: str, extras: Iterable[str], python: str
                    ) -> tuple[list[Package], list[str]]:
    """The project's direct dependencies (plus those of ``extras``) with the versions ``uv.lock``
    resolved for Linux x86_64 / ``python``; returns the packages and notes."""
    lock = tomllib.loads(lock_text)
    notes: list[str] = []
    pkgs = lock.get("package", [])
    root = _project(pkgs, project_name)
    entries = list(root.get("dependencies", []))
    for extra in _synced_extras(root, extras):
        entries.extend(root["optional-dependencies"][extra])
    env = marker_environment(python)
    by_name = _by_name(pkgs)
    out: dict[str, Package] = {}
    for dep in entries:
        name = canonical_name(dep["name"])
        entry = _resolved(dep, by_name, env, env, notes)
        if entry is None:
            continue
        version = str(entry["version"])
        extras_txt = "[" + ",".join(dep["extra"]) + "]" if dep.get("extra") else ""
        out[name] = Package(name, f"{name}{extras_txt}=={version}", version, "uv", [])
    return [out[k] for k in sorted(out)], notes


def lock_closure(lock_text: str, project_name: str, extras: Iterable[str], python: str
                 ) -> tuple[dict[str, str], list[str]]:
    """``{canonical name: version}`` of every lock entry ``uv sync --extra <extras> --no-dev
    --no-install-project`` installs on Linux x86_64 / ``python``: the transitive closure of the project's
    ``dependencies`` and the ``optional-dependencies`` of ``extras``, following each entry's ``dependencies``
    whose ``marker`` holds (``extra`` is the extra being followed, ``""`` outside one) and, for a dependency
    naming extras (``{ name = "x", extra = ["y"] }``), ``x``'s ``optional-dependencies.y``. The project itself
    and dev groups are left out. Returns the versions (sorted by name) and notes (ambiguous or missing
    entries, a name reached at two versions)."""
    lock = tomllib.loads(lock_text)
    pkgs = lock.get("package", [])
    root = _project(pkgs, project_name)
    by_name = _by_name(pkgs)
    env = marker_environment(python)
    notes: list[str] = []
    locked: dict[str, str] = {}
    todo: list[tuple[LockEntry, str]] = [(root, "")] + [(root, e) for e in _synced_extras(root, extras)]
    done: set[tuple[int, str]] = set()
    while todo:
        entry, extra = todo.pop(0)
        if (id(entry), extra) in done:
            continue
        done.add((id(entry), extra))
        name = canonical_name(entry["name"])
        if entry is not root:
            version = str(entry["version"])
            if locked.get(name, version) != version:
                notes.append(f"uv.lock: {name} reached at {locked[name]} and {version}; kept {locked[name]}")
            else:
                locked[name] = version
        if extra:
            optional = entry.get("optional-dependencies", {})
            if extra not in optional:
                notes.append(f"uv.lock: {name} has no extra {extra}")
            deps = optional.get(extra, [])
        else:
            deps = entry.get("dependencies", [])
        dep_env = {**env, "extra": extra}
        for dep in deps:
            found = _resolved(dep, by_name, dep_env, env, notes, f" (from {name})")
            if found is not None:
                todo.append((found, ""))
                todo.extend((found, x) for x in dep.get("extra", []))
    return dict(sorted(locked.items())), notes
