"""The code blocks of README.md and the documentation site (docs/**/*.md).

Every fenced block is either run by a test or marked as not run, with the reason, by an HTML
comment on the nearest non-blank line before it::

    <!-- not run: starts a 2-host job; tests/jobs run the same -->

No block is run by a test today, so every block carries the comment; a block without it fails
here. Whatever is not run is still checked as far as it can be without running it: a ```python
block must compile, a ```bash block must parse (``bash -n``). The site itself (links, anchors,
the nav) is checked by ``nox -s docs`` (``mkdocs build --strict``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)[^`]*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None  # the not-run reason, when the block is marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a Markdown file (``text``: its content, else read), with the not-run
    marker before each."""
    lines = (path.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        end = i + 1
        while end < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$",
                                                lines[end]):
            end += 1
        assert end < len(lines), f"{path.relative_to(ROOT)}:{i + 1}: a code block that is never closed"
        before = next((line for line in reversed(lines[:i]) if line.strip()), "")
        marked = NOT_RUN.match(before)
        code = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        found.append(Block(path, i + 1, opening["lang"].lower(), code, marked["reason"] if marked else None))
        i = end + 1
    return found


ALL = [b for path in FILES for b in blocks(path)]


def test_the_files_were_read() -> None:
    assert (ROOT / "README.md") in FILES and len(FILES) > 10, FILES
    assert len(ALL) > 20, len(ALL)  # 27 blocks when this was written
    assert {b.lang for b in ALL} >= {"bash", "python"}


def test_every_block_is_run_or_marked_not_run_with_a_reason() -> None:
    unmarked = [b.where for b in ALL if b.marker is None]
    assert not unmarked, ("each code block needs, on the line before it, <!-- not run: REASON --> "
                          f"(or a test that runs it): {unmarked}")


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in ("python", "py")], ids=lambda b: b.where)
def test_python_blocks_compile(block: Block) -> None:
    compile(block.code, block.where, "exec")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
@pytest.mark.parametrize("block", [b for b in ALL if b.lang in ("bash", "sh", "shell")], ids=lambda b: b.where)
def test_bash_blocks_parse(block: Block) -> None:
    done = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{block.where}: {done.stderr}"


def test_the_rule_is_checked() -> None:
    """The parser finds a marker, misses a missing one, and reads a block's language and code."""
    sample = ROOT / "README.md"
    text = ("x\n\n<!-- not run: a reason -->\n```bash\necho hi\n```\n\n```python\nprint(1)\n```\n"
            "<!-- not run:  -->\n```\nplain\n```\n")
    found = blocks(sample, text)
    assert [(b.lang, b.code, b.marker) for b in found] == [
        ("bash", "echo hi\n", "a reason"), ("python", "print(1)\n", None), ("", "plain\n", None)]

