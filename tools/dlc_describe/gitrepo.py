"""Read-only access to a (bare) git mirror: files at a commit, folder listings, history."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone


class Git:
    """Read-only access to a (bare) git repository."""

    def __init__(self, path: str) -> None:
        """``path``: the repository (its ``.git`` or the bare mirror)."""
        self.path = path
        self._cache: dict[tuple[str, str], str | None] = {}

    def _run(self, *args: str, check: bool = True) -> str:
        """A git command's standard output (raises on failure when ``check``)."""
        proc = subprocess.run(["git", "-C", self.path, *args], capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def rev(self, ref: str) -> str:
        """The full commit id ``ref`` names."""
        return self._run("rev-parse", "--verify", ref + "^{commit}").strip()

    def show(self, commit: str, path: str) -> str | None:
        """The text of ``path`` at ``commit`` (``None`` if absent); cached."""
        key = (commit, path)
        if key not in self._cache:
            proc = subprocess.run(["git", "-C", self.path, "show", f"{commit}:{path}"], capture_output=True,
                                  check=False)
            self._cache[key] = proc.stdout.decode("utf-8", "replace") if proc.returncode == 0 else None
        return self._cache[key]

    def ls(self, commit: str, folder: str) -> list[str]:
        """Every file under ``folder`` at ``commit``, sorted."""
        return sorted(x for x in self._run("ls-tree", "-r", "--name-only", commit, "--", folder).split("\n") if x)

    def log(self, commit: str, paths: Sequence[str], needle: str | None = None) -> list[str]:
        """Commits (newest first) up to ``commit`` that changed ``paths`` (with ``needle``: changed how often it
        occurs, ``git log -S``)."""
        args = ["log", "--format=%H"]
        if needle:
            args += ["-S", needle]
        return [x for x in self._run(*args, commit, "--", *paths).split("\n") if x]

    def last_change(self, commit: str, paths: Sequence[str]) -> str | None:
        """The committer date, ISO 8601 UTC (``2025-07-21T16:37:14Z``), of the newest commit at or before
        ``commit`` that changed any of ``paths`` (``git log -1 --format=%cI``); ``None`` if none did."""
        out = self._run("log", "-1", "--format=%cI", commit, "--", *paths).strip()
        if not out:
            return None
        return datetime.fromisoformat(out).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def parent(self, commit: str) -> str | None:
        """The first parent of ``commit`` (``None`` for a root commit)."""
        out = self._run("rev-parse", "--verify", "--quiet", commit + "^1", check=False).strip()
        return out or None
