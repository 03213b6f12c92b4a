"""The shell words of a ``RUN`` line: tokens, simple commands and parameter expansion.

Read like a POSIX shell: quotes, ``${VAR}``/``$VAR`` (with ``:-``, ``%``, ``#`` ... operators), command
substitutions (known only when the build runs), control operators and redirections, comments.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass
class Part:
    """A piece of a shell word: literal text, a parameter expansion or a command substitution."""

    kind: str  # "lit" | "var" | "cmd"
    text: str  # literal text, variable name or command text
    quoted: bool
    op: str = ""  # parameter expansion operator (":-", "%", ...)
    arg: str = ""


@dataclass
class Word:
    """A shell word: its parts, the line it starts on and its text as written."""

    parts: list[Part]
    line: int
    raw: str


@dataclass
class Token:
    """A word, a control operator (``&&``, ``;``, ``|`` ...) or a redirection operator."""

    kind: str  # "word" | "op" | "redir"
    line: int
    word: Word | None = None
    op: str = ""


def _read_braced(s: str, i: int) -> tuple[str, int]:
    """``s[i]`` is just after ``${``; return the content and the index after ``}``."""
    depth = 1
    j = i
    while j < len(s):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[i:j], j + 1
        j += 1
    return s[i:], len(s)


def _read_parens(s: str, i: int) -> tuple[str, int]:
    """``s[i]`` is just after ``$(``; return the content and the index after the matching ``)``."""
    depth = 1
    j = i
    quote = ""
    while j < len(s):
        c = s[j]
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return s[i:j], j + 1
        j += 1
    return s[i:], len(s)


def _parse_dollar(s: str, i: int, quoted: bool) -> tuple[Part, int]:
    """``s[i] == "$"``; return the part it starts and the index after it."""
    nxt = s[i + 1] if i + 1 < len(s) else ""
    if nxt == "{":
        body, end = _read_braced(s, i + 2)
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(.*)$", body, re.S)
        if not m:
            return Part("lit", "${" + body + "}", quoted), end
        name, rest = m.group(1), m.group(2)
        m2 = re.match(r"(:-|:=|:\+|:\?|-|=|\+|\?|%%|%|##|#)(.*)$", rest, re.S)
        if m2:
            return Part("var", name, quoted, m2.group(1), m2.group(2)), end
        return Part("var", name, quoted), end
    if nxt == "(":
        body, end = _read_parens(s, i + 2)
        return Part("cmd", body, quoted), end
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", s[i + 1:])
    if m:
        return Part("var", m.group(), quoted), i + 1 + m.end()
    return Part("lit", "$", quoted), i + 1


def shell_tokens(text: str, char_lines: Sequence[int] | None = None) -> list[Token]:
    """Tokenise a shell command line into words, control operators and redirections (no
    expansion yet: words keep their ``$`` parts so variables set earlier in the line can be used)."""
    lines = list(char_lines) if char_lines is not None else [1] * len(text)
    if len(lines) < len(text):
        lines += [lines[-1] if lines else 1] * (len(text) - len(lines))
    tokens: list[Token] = []
    parts: list[Part] = []
    start = -1
    lit: list[str] = []
    lit_quoted = False

    def flush_lit() -> None:
        nonlocal lit
        if lit:
            parts.append(Part("lit", "".join(lit), lit_quoted))
            lit = []

    def end_word(i: int) -> None:
        nonlocal parts, start
        flush_lit()
        if start >= 0:
            tokens.append(Token("word", lines[start] if start < len(lines) else 0,
                                Word(parts, lines[start] if start < len(lines) else 0, text[start:i])))
        parts = []
        start = -1

    def begin(i: int) -> None:
        nonlocal start
        if start < 0:
            start = i

    def add_lit(c: str, quoted: bool) -> None:
        nonlocal lit_quoted
        if lit and lit_quoted != quoted:
            flush_lit()
        lit_quoted = quoted
        lit.append(c)

    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r":
            end_word(i)
            i += 1
            continue
        if c == "#" and start < 0:
            break  # comment to the end of the (joined) line
        if c == "\\":
            begin(i)
            if i + 1 < n:
                add_lit(text[i + 1], True)
            i += 2
            continue
        if c == "'":
            begin(i)
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            for ch in text[i + 1:j]:
                add_lit(ch, True)
            if i + 1 == j:
                add_lit("", True)
            i = j + 1
            continue
        if c == '"':
            begin(i)
            j = i + 1
            empty = True
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`':
                    add_lit(text[j + 1], True)
                    j += 2
                elif text[j] == "$":
                    flush_lit()
                    part, j = _parse_dollar(text, j, True)
                    parts.append(part)
                elif text[j] == "`":
                    k = text.find("`", j + 1)
                    k = n if k < 0 else k
                    flush_lit()
                    parts.append(Part("cmd", text[j + 1:k], True))
                    j = k + 1
                else:
                    add_lit(text[j], True)
                    j += 1
                empty = False
            if empty:
                parts.append(Part("lit", "", True))
            i = j + 1
            continue
        if c == "$":
            begin(i)
            flush_lit()
            part, i = _parse_dollar(text, i, False)
            parts.append(part)
            continue
        if c == "`":
            begin(i)
            k = text.find("`", i + 1)
            k = n if k < 0 else k
            flush_lit()
            parts.append(Part("cmd", text[i + 1:k], False))
            i = k + 1
            continue
        if c in "<>":
            # a word made only of digits right before a redirection is a file descriptor
            flush_lit()
            if start >= 0 and all(p.kind == "lit" and not p.quoted and p.text.isdigit() for p in parts):
                parts = []
                start = -1
            end_word(i)
            m = re.match(r"(>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)", text[i:])
            op = m.group() if m else c
            tokens.append(Token("redir", lines[i], op=op))
            i += len(op)
            continue
        if c in "&|;()":
            end_word(i)
            m = re.match(r"(&&|\|\||;;|&>>|&>|\||&|;|\(|\))", text[i:])
            op = m.group() if m else c
            tokens.append(Token("redir" if op.startswith("&>") else "op", lines[i], op=op))
            i += len(op)
            continue
        begin(i)
        add_lit(c, False)
        i += 1
    end_word(n)
    return tokens


def split_commands(tokens: Sequence[Token]) -> list[list[Word]]:
    """Simple commands (their words, redirection targets removed) in the order they appear."""
    commands: list[list[Word]] = []
    cur: list[Word] = []
    skip_next = False
    for tok in tokens:
        if tok.kind == "op":
            if cur:
                commands.append(cur)
            cur = []
            skip_next = False
        elif tok.kind == "redir":
            skip_next = True  # the redirection's target (or here-document delimiter)
        elif tok.word is not None:
            if skip_next:
                skip_next = False
                continue
            cur.append(tok.word)
    if cur:
        commands.append(cur)
    return commands


class Unresolved(Exception):
    """A word depends on something only known when the build runs (command output, unset variable)."""


def _pattern_strip(value: str, op: str, pattern: str) -> str:
    """``${v%pat}``, ``${v%%pat}``, ``${v#pat}``, ``${v##pat}``."""
    if op in ("%", "%%"):
        cands = range(len(value), -1, -1) if op == "%" else range(len(value) + 1)
        for k in cands:
            if fnmatch.fnmatchcase(value[k:], pattern):
                return value[:k]
        return value
    cands2 = range(len(value) + 1) if op == "#" else range(len(value), -1, -1)
    for k in cands2:
        if fnmatch.fnmatchcase(value[:k], pattern):
            return value[k:]
    return value


def expand_text(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$VAR``/``${VAR}`` in ``text`` (Dockerfile ``ARG``/``ENV``/``FROM``/``COPY`` values;
    quotes removed as Docker does). Unknown variables expand to ``""``."""
    words = [t.word for t in shell_tokens(text) if t.word is not None]
    out: list[str] = []
    for w in words:
        try:
            out.extend(expand_word(w, env, strict=False))
        except Unresolved:  # pragma: no cover - strict=False never raises
            out.append(w.raw)
    return " ".join(out)


def expand_word(word: Word, env: Mapping[str, str], strict: bool = True) -> list[str]:
    """Expand a word into fields (unquoted expansions split on blanks). With ``strict`` an unknown
    variable or a command substitution raises :class:`Unresolved`."""
    fields: list[str] = []
    cur = ""
    have = False
    for p in word.parts:
        if p.kind == "lit":
            cur += p.text
            have = True
            continue
        if p.kind == "cmd":
            if strict:
                raise Unresolved(f"$({p.text})")
            cur += ""
            have = True
            continue
        known = p.text in env
        value = env.get(p.text, "")
        if p.op in (":-", "-"):
            if (not known) or (p.op == ":-" and value == ""):
                value = expand_text(p.arg, env)
                known = True
        elif p.op in (":+", "+"):
            value = expand_text(p.arg, env) if known and (p.op == "+" or value) else ""
            known = True
        elif p.op in ("%", "%%", "#", "##"):
            value = _pattern_strip(value, p.op, p.arg)
        if not known and strict:
            raise Unresolved("${" + p.text + "}")
        if p.quoted:
            cur += value
            have = True
        else:
            pieces = re.split(r"[ \t\n]+", value)
            if len(pieces) == 1:
                cur += value
                have = have or bool(value)
            else:
                cur += pieces[0]
                if cur or have:
                    fields.append(cur)
                fields.extend(x for x in pieces[1:-1] if x)
                cur = pieces[-1]
                have = bool(cur)
    if have or cur or any(p.quoted for p in word.parts):
        fields.append(cur)
    return fields


def word_literal_prefix(word: Word) -> str:
    """The unquoted literal text a word starts with (to spot ``NAME=value`` assignments)."""
    if word.parts and word.parts[0].kind == "lit" and not word.parts[0].quoted:
        return word.parts[0].text
    return ""
