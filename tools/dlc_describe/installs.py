"""What a ``RUN`` does to the Python environment: pip / uv / conda installs and uninstalls, ``git clone`` +
``setup.py install``, ``pip wheel`` then an install by glob, ``uv sync``; and the package set the events leave."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .names import canonical_name
from .requirements import (
    Requirement,
    conda_to_pypi,
    parse_conda_spec,
    parse_pep508,
    parse_sdist_filename,
    parse_vcs_requirement,
    parse_wheel_filename,
    source_tree_distribution,
)
from .shell import Part, Unresolved, Word, expand_word, shell_tokens, split_commands, word_literal_prefix

_SHELL_KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "{", "}",
                   "!"}


@dataclass
class Event:
    """Something a build step does to the Python environment."""

    kind: str  # "install" | "uninstall" | "uv-sync" | "note"
    line: int
    via: str = ""  # "pip" | "conda"
    requirement: Requirement | None = None
    extra_lines: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # uninstall: canonical names; uv-sync: extras
    text: str = ""  # note text; uv-sync: pyproject path
    no_deps: bool = False  # pip install --no-deps: the package without its requirements
    command: int = 0  # install: the line of the ``pip`` word of the command (one pip resolution)


_PIP_OPTS_WITH_VALUE = {
    "-r", "--requirement", "-c", "--constraint", "-t", "--target", "--platform", "--python-version",
    "--implementation", "--abi", "--root", "--prefix", "--src", "--upgrade-strategy", "-C", "--config-settings",
    "--global-option", "--install-option", "--build-option", "-i", "--index-url", "--extra-index-url", "-f",
    "--find-links", "--log", "--proxy", "--retries", "--timeout", "--exists-action", "--trusted-host", "--cert",
    "--client-cert", "--cache-dir", "--python", "-p", "--use-feature", "--use-deprecated", "--progress-bar",
    "--report", "--only-binary", "--no-binary", "--root-user-action", "--keyring-provider", "--resume-retries",
    "-w", "--wheel-dir", "--index-strategy", "--override", "--resolution", "--prerelease", "--link-mode",
    "--python-platform", "--index", "--extra", "--group", "--directory", "--project", "--exclude-newer",
}
_PIP_EDITABLE = {"-e", "--editable"}
_CONDA_OPTS_WITH_VALUE = {
    "-c", "--channel", "-n", "--name", "-p", "--prefix", "--file", "--repodata-fn", "--solver",
    "--experimental-solver", "--platform", "--subdir",
}


@dataclass
class Clone:
    """A ``git clone``-d tree: its URL and the branch, tag or commit checked out."""

    url: str
    ref: str = ""


@dataclass
class RunContext:
    """What a ``RUN`` knows: its variables, working directory, clones and built wheels."""

    env: dict[str, str]
    cwd: str = "/"
    clones: dict[str, Clone] = field(default_factory=dict)
    built: dict[str, tuple[Requirement, int]] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)


def _is_python(prog: str) -> bool:
    """Whether ``prog`` is a Python interpreter (``python``, ``python3``, ``/opt/conda/bin/python3.11``)."""
    return re.fullmatch(r"python(\d+(\.\d+)?)?", posixpath.basename(prog)) is not None


def _options_and_positionals(args: Sequence[tuple[str, int]], with_value: set[str]
                             ) -> tuple[list[tuple[str, int]], list[tuple[str, str, int]]]:
    """Split ``args`` into positionals and (option, value) pairs."""
    pos: list[tuple[str, int]] = []
    opts: list[tuple[str, str, int]] = []
    k = 0
    while k < len(args):
        a, line = args[k]
        if a.startswith("-") and a != "-":
            if "=" in a and a.startswith("--"):
                o, v = a.split("=", 1)
                opts.append((o, v, line))
            elif a in with_value and k + 1 < len(args):
                opts.append((a, args[k + 1][0], line))
                k += 1
            else:
                opts.append((a, "", line))
        else:
            pos.append((a, line))
        k += 1
    return pos, opts


def _resolve_local(path: str, ctx: RunContext) -> Clone | None:
    """The clone a local path (relative to the working directory) points into."""
    full = posixpath.normpath(posixpath.join(ctx.cwd, path))
    return ctx.clones.get(full)


def classify_pip_argument(arg: str, ctx: RunContext) -> Requirement | None:
    """A ``pip install`` positional argument as a requirement (see the module docstring)."""
    base = arg.split("#", 1)[0].split("?", 1)[0]
    if base.endswith(".whl"):
        if "*" in posixpath.basename(base) or "?" in posixpath.basename(base):
            prefix = re.split(r"[-*?\[]", posixpath.basename(base), maxsplit=1)[0]
            name = canonical_name(prefix)
            built = ctx.built.get(name)
            if built:
                return built[0]
            return Requirement(name, name, None)
        return parse_wheel_filename(base)
    vcs = parse_vcs_requirement(arg)
    if vcs:
        return vcs
    if re.match(r"^[a-z]+://", arg):
        return parse_sdist_filename(arg)
    if arg.startswith((".", "/", "~")):
        clone = _resolve_local(arg, ctx)
        if clone is None:
            return None
        name = source_tree_distribution(clone.url)
        ref = f"@{clone.ref}" if clone.ref else ""
        return Requirement(name, f"{name} @ git+{clone.url}{ref}", None)
    return parse_pep508(arg)


def run_events(text: str, char_lines: Sequence[int], ctx: RunContext) -> list[Event]:
    """The Python-environment events of one ``RUN`` (shell form) in a context. Pure: reads only its
    arguments (``ctx`` is updated with the ``RUN``'s working-directory changes and clones)."""
    events: list[Event] = []
    shell_vars: dict[str, str] = dict(ctx.env)
    for words in split_commands(shell_tokens(text, char_lines)):
        # leading NAME=value words: a prefix environment, or (alone) shell variables
        prefix_env: dict[str, str | None] = {}
        k = 0
        while k < len(words):
            lit = word_literal_prefix(words[k])
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=", lit)
            if not m:
                break
            w = words[k]
            rest = Word([Part("lit", lit[m.end():], False), *w.parts[1:]], w.line, w.raw)
            try:
                prefix_env[m.group(1)] = "".join(expand_word(rest, shell_vars))
            except Unresolved:
                prefix_env[m.group(1)] = None  # known only when the build runs
            k += 1
        if k == len(words):
            for name, value in prefix_env.items():
                if value is None:
                    shell_vars.pop(name, None)
                else:
                    shell_vars[name] = value
            continue
        env = {**shell_vars, **{n: v for n, v in prefix_env.items() if v is not None}}
        for name, value in prefix_env.items():
            if value is None:
                env.pop(name, None)
        argv: list[tuple[str, int]] = []
        unresolved: list[tuple[str, int, str]] = []
        for w in words[k:]:
            try:
                for f in expand_word(w, env):
                    argv.append((f, w.line))
            except Unresolved as exc:
                unresolved.append((w.raw, w.line, str(exc)))
                argv.append(("\0" + w.raw, w.line))
        while argv and argv[0][0] in _SHELL_KEYWORDS:
            argv.pop(0)
        if not argv:
            continue
        prog = argv[0][0]
        if prog == "export":
            for a, _ in argv[1:]:
                if "=" in a:
                    n, v = a.split("=", 1)
                    shell_vars[n] = v
            continue
        events.extend(_command_events(argv, ctx))
    return events


def _command_events(argv: list[tuple[str, int]], ctx: RunContext) -> list[Event]:
    """The events of one simple command (after expansion)."""
    prog = posixpath.basename(argv[0][0])
    line0 = argv[0][1]
    args = argv[1:]
    if prog == "cd":
        target = args[0][0] if args else "/root"
        if not target.startswith("\0"):
            ctx.cwd = posixpath.normpath(posixpath.join(ctx.cwd, target))
        return []
    if prog == "git" and args:
        return _git_events(args, ctx)
    # pip / python -m pip / uv pip
    if re.fullmatch(r"pip(\d+(\.\d+)?)?", prog):
        return _pip_events(args, ctx, line0)
    if _is_python(prog) and len(args) >= 2 and args[0][0] == "-m" and args[1][0] == "pip":
        return _pip_events(args[2:], ctx, line0)
    if _is_python(prog) and args and args[0][0] == "setup.py" and any(a == "install" for a, _ in args[1:]):
        clone = ctx.clones.get(ctx.cwd)
        if clone is None:
            return [Event("note", line0, text=f"setup.py install in unknown tree {ctx.cwd}")]
        name = source_tree_distribution(clone.url)
        ref = f"@{clone.ref}" if clone.ref else ""
        return [Event("install", line0, "pip", Requirement(name, f"{name} @ git+{clone.url}{ref}", None))]
    if prog == "uv" and args:
        if args[0][0] == "pip":
            return _pip_events(args[1:], ctx, line0)
        if args[0][0] == "sync":
            return _uv_sync_events(args[1:], ctx, line0)
        return []
    if prog in ("conda", "mamba", "micromamba"):
        return _conda_events(args, line0)
    return []


def _git_events(args: list[tuple[str, int]], ctx: RunContext) -> list[Event]:
    """Record ``git clone`` destinations and ``git checkout`` refs in ``ctx``."""
    sub = args[0][0]
    if sub == "clone":
        pos, opts = _options_and_positionals(
            args[1:], {"-b", "--branch", "--depth", "-c", "--config", "-o", "--origin", "--reference", "-j",
                       "--jobs", "--filter", "--shallow-since", "--separate-git-dir"})
        if not pos:
            return []
        url = pos[0][0]
        dest = pos[1][0] if len(pos) > 1 else re.sub(r"\.git$", "", url.rstrip("/").rsplit("/", 1)[-1])
        ref = next((v for o, v, _ in opts if o in ("-b", "--branch")), "")
        ctx.clones[posixpath.normpath(posixpath.join(ctx.cwd, dest))] = Clone(url, ref)
    elif sub == "checkout":
        pos, _ = _options_and_positionals(args[1:], {"-b", "-B", "--orphan"})
        clone = ctx.clones.get(ctx.cwd)
        if clone is not None and pos and not pos[0][0].startswith("\0"):
            clone.ref = pos[0][0]
    return []


def _pip_events(args: list[tuple[str, int]], ctx: RunContext, line0: int) -> list[Event]:
    # global options may come before the sub-command
    """``pip install`` / ``uninstall`` / ``wheel`` (global options before the sub-command allowed)."""
    k = 0
    while k < len(args) and args[k][0].startswith("-"):
        k += 2 if args[k][0] in _PIP_OPTS_WITH_VALUE and "=" not in args[k][0] else 1
    if k >= len(args):
        return []
    sub = args[k][0]
    rest = args[k + 1:]
    events: list[Event] = []
    if sub == "install":
        pos, opts = _options_and_positionals(rest, _PIP_OPTS_WITH_VALUE - {"-e", "--editable"})
        for o, v, line in opts:
            if o in _PIP_EDITABLE:
                pos.append((v, line))
            elif o in ("-r", "--requirement"):
                events.append(Event("note", line, text=f"requirements file not read: {v}"))
        for a, line in pos:
            if a.startswith("\0"):
                events.append(Event("note", line, text=f"unresolved pip argument {a[1:]}"))
                continue
            req = classify_pip_argument(a, ctx)
            if req is None:
                events.append(Event("note", line, text=f"unrecognised pip argument {a}"))
                continue
            extra: list[int] = []
            built = ctx.built.get(req.name)
            if built and built[0] is req:
                extra = [built[1]]
            events.append(Event("install", line, "pip", req, extra_lines=extra,
                                no_deps=any(o == "--no-deps" for o, _, _ in opts), command=line0))
    elif sub == "uninstall":
        pos, _ = _options_and_positionals(rest, {"-r", "--requirement", "--root-user-action"})
        names = [canonical_name(a) for a, _ in pos if not a.startswith("\0")]
        if names:
            events.append(Event("uninstall", pos[0][1], names=names))
    elif sub == "wheel":
        pos, _ = _options_and_positionals(rest, _PIP_OPTS_WITH_VALUE)
        for a, line in pos:
            req = None if a.startswith("\0") else classify_pip_argument(a, ctx)
            if req is not None:
                ctx.built[req.name] = (req, line)
    return events


def _uv_sync_events(args: list[tuple[str, int]], ctx: RunContext, line0: int) -> list[Event]:
    """``uv sync``: the extras synced and the ``pyproject.toml`` copied last before it."""
    _, opts = _options_and_positionals(args, _PIP_OPTS_WITH_VALUE)
    extras = [v for o, v, _ in opts if o == "--extra"]
    if any(o == "--all-extras" for o, _, _ in opts):
        extras.append("*")
    project = ""
    for path in reversed(ctx.copied):
        if posixpath.basename(path) == "pyproject.toml":
            project = path
            break
    return [Event("uv-sync", line0, names=extras, text=project)]


def _conda_events(args: list[tuple[str, int]], line0: int) -> list[Event]:
    """``conda``/``mamba`` ``install``/``update`` and ``remove``/``uninstall``."""
    pos, _ = _options_and_positionals(args, _CONDA_OPTS_WITH_VALUE)
    if not pos:
        return []
    sub = pos[0][0]
    specs = pos[1:]
    events: list[Event] = []
    if sub in ("install", "update", "upgrade"):
        for a, line in specs:
            if a.startswith("\0"):
                events.append(Event("note", line, text=f"unresolved conda argument {a[1:]}"))
                continue
            spec = parse_conda_spec(a)
            if spec is None:
                events.append(Event("note", line, text=f"unrecognised conda spec {a}"))
            elif spec.requirement is None:
                events.append(Event("note", line, text=f"conda {spec.name} skipped: {spec.skipped}"))
            else:
                events.append(Event("install", line, "conda", spec.requirement))
    elif sub in ("remove", "uninstall"):
        names = [canonical_name(conda_to_pypi(a.lower())) for a, _ in specs if not a.startswith("\0")]
        if names:
            events.append(Event("uninstall", specs[0][1], names=names))
    return events


@dataclass
class Package:
    """One installed package of an image, as written to the JSON."""

    name: str
    requirement: str
    version: str | None
    via: str
    lines: list[int]
    no_deps: bool = False  #: installed with ``pip install --no-deps`` (its requirements not resolved)
    #: pip: the line of the ``pip install`` command that installed it last. Each such command is one
    #: resolution in AWS's build, and a later one may change what an earlier one installed.
    command: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The JSON object (``lines`` sorted, without duplicates; ``no_deps``, ``command`` only when set)."""
        return {"name": self.name, "requirement": self.requirement, "version": self.version, "via": self.via,
                "lines": sorted(set(self.lines)), **({"no_deps": True} if self.no_deps else {}),
                **({"command": self.command} if self.command else {})}


def apply_events(events: Iterable[Event]) -> tuple[dict[str, Package], set[str]]:
    """Installed packages and names uninstalled (not installed again) after ``events``."""
    packages: dict[str, Package] = {}
    uninstalled: set[str] = set()
    for ev in events:
        if ev.kind == "install" and ev.requirement is not None:
            req = ev.requirement
            lines = [ev.line, *ev.extra_lines]
            old = packages.get(req.name)
            if old:
                lines = old.lines + lines
            packages[req.name] = Package(req.name, req.requirement, req.version, ev.via, sorted(set(lines)),
                                         ev.no_deps, ev.command or None)
            uninstalled.discard(req.name)
        elif ev.kind == "uninstall":
            for name in ev.names:
                packages.pop(name, None)
                uninstalled.add(name)
    return packages, uninstalled
