"""PEP 508 environment markers, evaluated for the Linux x86_64 CPython of an image.

The subset ``uv.lock`` writes (and a little more): ``and``/``or``, parentheses, the comparisons ``==``, ``!=``,
``<``, ``<=``, ``>``, ``>=``, ``~=``, ``===``, ``in``, ``not in``, either side a variable or a quoted string.
``python_version``, ``python_full_version``, ``implementation_version`` and ``platform_release`` compare as
versions (PEP 440 release numbers, zero padded, with ``a``/``b``/``rc``/``.post``/``.dev`` parts and ``==X.*``
prefixes) when both sides read as one; everything else compares as strings (``~=`` then is an error).
``extra`` compares PEP 503 normalised names with the extra being evaluated (``""`` outside an extra). An unknown
variable is ``""``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from .names import canonical_name

#: Where the Python interpreter's marker values come from for uv.lock markers: Linux x86_64 CPython.
LINUX_X86_64 = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
#: Marker variables whose values are versions.
VERSION_VARIABLES = frozenset({"python_version", "python_full_version", "implementation_version", "platform_release"})

_TOKEN = re.compile(r"""\s*(?:(?P<paren>[()])|(?P<string>'[^']*'|"[^"]*")"""
                    r"""|(?P<op>===|==|!=|~=|<=|>=|<|>|not\s+in\b|in\b)|(?P<bool>and\b|or\b)"""
                    r"""|(?P<name>[A-Za-z_][A-Za-z0-9_.]*))""")
_VERSION = re.compile(r"""v?(?P<release>\d+(?:\.\d+)*)(?P<wild>\.\*)?
                          (?:[-_.]?(?P<pre>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?
                          (?:[-_.]?(?P<post>post|rev|r)[-_.]?(?P<post_n>\d*))?
                          (?:[-_.]?dev[-_.]?(?P<dev_n>\d*))?
                          (?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?""", re.X | re.I)
_PRE_ORDER = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}

VersionKey = tuple[tuple[int, ...], tuple[int, int], int, tuple[int, int]]


def marker_tokens(text: str) -> list[tuple[str, str]]:
    """``(kind, text)`` tokens of a marker: ``paren``, ``string`` (quotes kept), ``op``, ``bool``, ``name``."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"marker {text!r}: cannot read {text[pos:]!r}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        out.append((kind, "not in" if kind == "op" and value.startswith("not") else value))
        pos = m.end()
    return out


def version_key(text: str, length: int = 0) -> VersionKey | None:
    """A sort key of a PEP 440 version (release zero padded to ``length``), ``None`` if not one."""
    m = _VERSION.fullmatch(text.strip())
    if not m or m.group("wild"):
        return None
    release = tuple(int(x) for x in m.group("release").split("."))
    release += (0,) * (length - len(release))
    has_pre, has_post, has_dev = m.group("pre") is not None, m.group("post") is not None, m.group("dev_n") is not None
    # a dev release sorts before its pre-releases; a final release after them
    pre = (_PRE_ORDER[m.group("pre").lower()], int(m.group("pre_n") or 0)) if has_pre else (
        (-1, 0) if has_dev and not has_post else (3, 0))
    post = int(m.group("post_n") or 0) if has_post else -1
    dev = (0, int(m.group("dev_n") or 0)) if has_dev else (1, 0)
    return release, pre, post, dev


def compare_versions(left: str, op: str, right: str) -> bool | None:
    """``left op right`` as PEP 440 versions (``right`` may end in ``.*`` for ``==``/``!=``); ``None`` when
    either side is not a version."""
    if op == "===":
        return left == right
    if right.endswith(".*") and op in ("==", "!="):
        lkey, prefix = version_key(left), version_key(right[:-2])
        if lkey is None or prefix is None:
            return None
        n = len(prefix[0])
        return (lkey[0][:n] + (0,) * (n - len(lkey[0])) == prefix[0]) == (op == "==")
    length = max(len(x.split(".")) for x in (left, right))
    a, b = version_key(left, length), version_key(right, length)
    if a is None or b is None:
        return None
    if op == "~=":
        parts = right.split(".")
        return a >= b and len(parts) > 1 and compare_versions(left, "==", ".".join(parts[:-1]) + ".*") is True
    return bool(_COMPARE[op](a, b))


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _compare(left_tok: tuple[str, str], op: str, right_tok: tuple[str, str], env: Mapping[str, str]) -> bool:
    def value(tok: tuple[str, str]) -> str:
        return tok[1][1:-1] if tok[0] == "string" else env.get(tok[1], "")

    left, right = value(left_tok), value(right_tok)
    names = {t[1] for t in (left_tok, right_tok) if t[0] == "name"}
    if "extra" in names:
        left, right = canonical_name(left), canonical_name(right)
    if op in ("in", "not in"):
        return (left in right) == (op == "in")
    if names & VERSION_VARIABLES:
        as_versions = compare_versions(left, op, right)
        if as_versions is not None:
            return as_versions
    if op == "===":
        return left == right
    if op == "~=":
        raise ValueError(f"~= between {left!r} and {right!r}, which are not both versions")
    return bool(_COMPARE[op](left, right))


def evaluate_marker(marker: str, env: Mapping[str, str]) -> bool:
    """Evaluate a PEP 508 environment marker in ``env`` (see the module docstring); an empty marker is true.
    Raises :class:`ValueError` on a marker it cannot read."""
    toks = marker_tokens(marker)
    pos = 0

    def take(kind: str) -> tuple[str, str]:
        nonlocal pos
        if pos >= len(toks) or toks[pos][0] != kind:
            raise ValueError(f"marker {marker!r}: expected {kind} at token {pos}")
        pos += 1
        return toks[pos - 1]

    def atom() -> bool:
        nonlocal pos
        if pos < len(toks) and toks[pos] == ("paren", "("):
            pos += 1
            result = disjunction()
            if take("paren")[1] != ")":
                raise ValueError(f"marker {marker!r}: unbalanced parentheses")
            return result
        left = toks[pos] if pos < len(toks) else ("", "")
        if left[0] not in ("string", "name"):
            raise ValueError(f"marker {marker!r}: expected a value at token {pos}")
        pos += 1
        op = take("op")[1]
        right = toks[pos] if pos < len(toks) else ("", "")
        if right[0] not in ("string", "name"):
            raise ValueError(f"marker {marker!r}: expected a value at token {pos}")
        pos += 1
        return _compare(left, op, right, env)

    def chain(operand: Callable[[], bool], word: str) -> bool:
        """``operand (word operand)*``: every operand is read (the tokens must be consumed)."""
        nonlocal pos
        results = [operand()]
        while pos < len(toks) and toks[pos] == ("bool", word):
            pos += 1
            results.append(operand())
        return all(results) if word == "and" else any(results)

    def conjunction() -> bool:
        return chain(atom, "and")

    def disjunction() -> bool:
        return chain(conjunction, "or")

    if not toks:
        return True
    result = disjunction()
    if pos != len(toks):
        raise ValueError(f"marker {marker!r}: unexpected {toks[pos][1]!r}")
    return result


def marker_environment(python: str) -> dict[str, str]:
    """Marker variables of Linux x86_64 CPython ``python`` (``"3.12"`` -> ``python_full_version`` ``3.12.0``)."""
    full = python if len(python.split(".")) >= 3 else python + ".0"
    env = dict(LINUX_X86_64)
    env.update({"python_version": ".".join(python.split(".")[:2]), "python_full_version": full,
                "implementation_version": full})
    return env
