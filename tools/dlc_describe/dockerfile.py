"""Dockerfiles as BuildKit reads them: instructions, stages, ``ARG``/``ENV`` scoping, which stages a target
is built from, and the Python-environment events of those stages."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .installs import Event, RunContext, run_events
from .shell import expand_text, shell_tokens


@dataclass
class Instruction:
    """One Dockerfile instruction after continuation joining."""

    keyword: str
    args: str
    line: int
    #: Physical line number of each character of ``args``.
    char_lines: list[int]


_CONTINUATION = re.compile(r"\\[ \t]*$")


def parse_instructions(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions, joining ``\\`` continuations the way BuildKit does:
    comment lines and blank lines inside a continuation are dropped, nothing is inserted where a
    line break was removed."""
    lines = text.split("\n")
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            i += 1
            continue
        start = i + 1
        buf: list[str] = []
        char_lines: list[int] = []
        while True:
            raw = lines[i].rstrip("\r")
            m = _CONTINUATION.search(raw)
            piece = raw[: m.start()] if m else raw
            buf.append(piece)
            char_lines.extend([i + 1] * len(piece))
            i += 1
            if not m:
                break
            while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
                i += 1
            if i >= len(lines):
                break
        joined = "".join(buf)
        lead = len(joined) - len(joined.lstrip())
        joined, char_lines = joined[lead:], char_lines[lead:]
        m2 = re.match(r"(\S+)\s*", joined)
        if not m2:
            continue
        keyword = m2.group(1).upper()
        out.append(Instruction(keyword, joined[m2.end():], start, char_lines[m2.end():]))
    return out


@dataclass
class Stage:
    """One ``FROM`` stage: its name (lower case, or its index), base and instructions."""

    index: int
    name: str
    base: str  # the FROM image or stage name, expanded
    line: int
    instructions: list[Instruction]


def _arg_pairs(args: str) -> list[tuple[str, str | None]]:
    """``ARG`` names with their default (``None`` when declared without one)."""
    out: list[tuple[str, str | None]] = []
    for tok in shell_tokens(args):
        if tok.word is None:
            continue
        raw = tok.word.raw
        if "=" in raw:
            name, value = raw.split("=", 1)
            out.append((name, value))
        else:
            out.append((raw, None))
    return out


def _env_pairs(args: str) -> list[tuple[str, str]]:
    """``ENV`` names and values (``ENV a=1 b=2`` and the legacy ``ENV a 1``)."""
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*=", args.strip()) is None:
        m = re.match(r"^\s*(\S+)\s+(.*)$", args, re.S)
        return [(m.group(1), m.group(2).strip())] if m else []
    return [(name, value or "") for name, value in _arg_pairs(args)]


@dataclass
class Dockerfile:
    """A Dockerfile's global ``ARG`` instructions (before the first ``FROM``) and its stages."""

    global_args: dict[str, str | None]
    stages: list[Stage]


def parse_dockerfile(text: str, build_args: Mapping[str, str] | None = None) -> Dockerfile:
    """Global ARGs (defaults, build arguments applied) and stages (``FROM`` expanded)."""
    build_args = dict(build_args or {})
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for ins in parse_instructions(text):
        if ins.keyword == "FROM":
            words = [w for w in expand_text(ins.args, {k: v for k, v in global_args.items() if v is not None}).split()
                     if not w.startswith("--")]
            image = words[0] if words else ""
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else str(len(stages))
            stages.append(Stage(len(stages), name.lower(), image, ins.line, []))
        elif not stages:
            if ins.keyword == "ARG":
                known = {k: v for k, v in global_args.items() if v is not None}
                for name, value in _arg_pairs(ins.args):
                    if name in build_args:
                        global_args[name] = build_args[name]
                    else:
                        global_args[name] = None if value is None else expand_text(value, known)
        else:
            stages[-1].instructions.append(ins)
    return Dockerfile(global_args, stages)


def stage_closure(df: Dockerfile, target: str) -> list[Stage]:
    """The target stage and every stage it is built ``FROM`` or copies ``--from``, in file order."""
    by_name = {s.name: s for s in df.stages}
    by_name.update({str(s.index): s for s in df.stages})
    todo = [by_name[target.lower()]]
    seen: dict[int, Stage] = {}
    while todo:
        st = todo.pop()
        if st.index in seen:
            continue
        seen[st.index] = st
        if st.base.lower() in by_name:
            todo.append(by_name[st.base.lower()])
        for ins in st.instructions:
            if ins.keyword == "COPY":
                m = re.search(r"--from=(\S+)", ins.args)
                if m and m.group(1).lower() in by_name:
                    todo.append(by_name[m.group(1).lower()])
    return [seen[i] for i in sorted(seen)]


def root_image(df: Dockerfile, stage: Stage) -> str:
    """The external image ``stage`` is ultimately built ``FROM``."""
    by_name = {s.name: s for s in df.stages}
    while stage.base.lower() in by_name and by_name[stage.base.lower()] is not stage:
        stage = by_name[stage.base.lower()]
    return stage.base


@dataclass
class StageScope:
    """What a stage passes to the stages built ``FROM`` it: variables, working directory, copied files."""

    env: dict[str, str]
    workdir: str
    copied: list[str]


def dockerfile_events(df: Dockerfile, target: str, build_args: Mapping[str, str] | None = None
                      ) -> list[Event]:
    """Every Python-environment event of the stages ``target`` is built from, in file order."""
    build_args = dict(build_args or {})
    stages = stage_closure(df, target)
    scopes: dict[str, StageScope] = {}
    events: list[Event] = []
    for st in stages:
        parent = scopes.get(st.base.lower())
        scope = StageScope(dict(parent.env), parent.workdir, list(parent.copied)) if parent else StageScope({}, "/", [])
        for ins in st.instructions:
            if ins.keyword == "ARG":
                for name, value in _arg_pairs(ins.args):
                    if name in build_args:
                        scope.env[name] = build_args[name]
                    elif value is not None:
                        scope.env[name] = expand_text(value, scope.env)
                    elif df.global_args.get(name) is not None:
                        scope.env[name] = str(df.global_args[name])
                    # else: declared without a value; keeps what a parent stage gave it, if anything
            elif ins.keyword == "ENV":
                for name, value in _env_pairs(ins.args):
                    scope.env[name] = expand_text(value, scope.env)
            elif ins.keyword == "WORKDIR":
                scope.workdir = posixpath.normpath(posixpath.join(scope.workdir, expand_text(ins.args, scope.env)))
            elif ins.keyword == "COPY" and "--from" not in ins.args:
                words = [w for w in expand_text(ins.args, scope.env).split() if not w.startswith("--")]
                scope.copied.extend(words[:-1])
            elif ins.keyword == "RUN":
                text, lines = ins.args, ins.char_lines
                m = re.match(r"^(\s*--\S+\s*)+", text)
                if m:
                    text, lines = text[m.end():], lines[m.end():]
                if text.lstrip().startswith("["):
                    events.append(Event("note", ins.line, text="exec-form RUN not read"))
                    continue
                ctx = RunContext(dict(scope.env), scope.workdir, copied=scope.copied)
                events.extend(run_events(text, lines, ctx))
        scopes[st.name] = scope
        scopes[str(st.index)] = scope
    return events


def arg_default(text: str, name: str) -> str | None:
    """The default of the first ``ARG name=...`` in a Dockerfile (``None`` if none)."""
    for ins in parse_instructions(text):
        if ins.keyword == "ARG":
            for n, v in _arg_pairs(ins.args):
                if n == name and v is not None:
                    return expand_text(v, {})
    return None


def last_stage_name(text: str) -> str:
    """The name of a Dockerfile's last stage (what ``docker build`` builds without ``--target``)."""
    df = parse_dockerfile(text)
    return df.stages[-1].name if df.stages else "0"


def cuda_from_image(image: str) -> str | None:
    """The CUDA version in an image name (``nvidia/cuda:12.4.1-...``, ``.../base:12.9.1-gpu-...``)."""
    m = re.search(r"nvidia/cuda:(\d+(?:\.\d+)+)", image) or re.search(r"/base:(\d+(?:\.\d+)+)-gpu", image)
    return m.group(1) if m else None
