"""The framework image's downloads (``docker/build.py``: ``artifacts``, ``_fetch``), cold.

The torch 1.12 image's build resolved its files with the image's Python 3.9 and then
handed the cp39 wheel URLs to this machine's ``pip download``, which refuses a wheel its own
Python (3.11) cannot install. These tests start from empty folders every time, so no earlier
build's downloads can make them pass.

Oracle: pip's own ``install --dry-run --report`` (report format 1, ``download_info.archive_info``)
for a target interpreter that is not this one, and ``hashlib`` over the bytes PyPI serves. Needs
PyPI, as the image build does.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from emulator.backends.docker import images

build = images._build_module()

#: A small package with a C extension: its cp39 wheel is of another ABI than this interpreter's.
FOREIGN = "markupsafe==2.1.5"
FOREIGN_PY = "3.9"


def _report(tmp_path: Path, requirement: str) -> dict[str, Any]:
    """pip's resolution of ``requirement`` for CPython 3.9 on manylinux2014 (not this Python)."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--no-deps",
         "--only-binary=:all:", *build.python_args(FOREIGN_PY), "--platform", "manylinux2014_x86_64",
         "--target", str(tmp_path / "unused"), "--report", str(report), requirement],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(report.read_text())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_puts_a_foreign_abi_wheel_into_an_empty_folder(tmp_path: Path) -> None:
    assert sys.version_info[:2] != (3, 9), "the test needs a host Python other than the target's"
    report = _report(tmp_path, FOREIGN)
    arts = build.artifacts(report)
    assert list(arts) == ["markupsafe==2.1.5"]
    art = arts["markupsafe==2.1.5"]
    expected = report["install"][0]["download_info"]["archive_info"]["hashes"]["sha256"]
    assert art.sha256 == expected and "-cp39-cp39-" in art.name
    dest, old = tmp_path / "wheels", tmp_path / "wheels.old"
    old.mkdir()
    build._fetch([art], dest, old, say=lambda _: None)
    assert sorted(p.name for p in dest.iterdir()) == [art.name]  # nothing else, no .part left
    wheel = dest / art.name
    assert _sha256(wheel) == expected
    with zipfile.ZipFile(wheel) as z:
        tags = [ln for name in z.namelist() if name.endswith(".dist-info/WHEEL")
                for ln in z.read(name).decode().splitlines() if ln.startswith("Tag: ")]
    assert tags and all(t.startswith("Tag: cp39-cp39-") for t in tags), tags


def test_fetch_stops_on_a_hash_mismatch_and_leaves_no_file(tmp_path: Path) -> None:
    art = build.artifacts(_report(tmp_path, FOREIGN))["markupsafe==2.1.5"]
    wrong = build.Artifact(art.url, "0" * 64)
    dest, old = tmp_path / "wheels", tmp_path / "wheels.old"
    old.mkdir()
    with pytest.raises(SystemExit) as err:
        build._fetch([wrong], dest, old, say=lambda _: None)
    assert "does not match" in str(err.value) and art.name in str(err.value)
    assert list(dest.iterdir()) == []


def test_an_earlier_download_is_reused_only_when_its_hash_matches(tmp_path: Path) -> None:
    art = build.artifacts(_report(tmp_path, FOREIGN))["markupsafe==2.1.5"]
    dest, old = tmp_path / "wheels", tmp_path / "wheels.old"
    old.mkdir()
    (old / art.name).write_bytes(b"an interrupted download")  # same name, other bytes
    build._fetch([art], dest, old, say=lambda _: None)
    assert _sha256(dest / art.name) == art.sha256  # fetched again, not the stale file
    again = tmp_path / "again"
    build._fetch([art], again, dest, say=lambda _: None)  # a rebuild: the good file moves over
    assert _sha256(again / art.name) == art.sha256 and not (dest / art.name).exists()


def test_a_remote_file_without_a_hash_is_refused() -> None:
    report = {"install": [{"metadata": {"name": "x", "version": "1"},
                           "download_info": {"url": "https://example.invalid/x-1-py3-none-any.whl",
                                             "archive_info": {}}}]}
    with pytest.raises(SystemExit, match="no sha256"):
        build.artifacts(report)
    older = {"install": [{"metadata": {"name": "X_y", "version": "1"},
                          "download_info": {"url": "https://example.invalid/x_y-1-py3-none-any.whl",
                                            "archive_info": {"hash": "sha256=" + "a" * 64}}}]}
    assert build.artifacts(older) == {"x-y==1": build.Artifact(older["install"][0]["download_info"]["url"],
                                                               "a" * 64)}


@pytest.mark.docker
def test_resolve_and_fetch_with_the_python39_base(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The build's own two steps for the torch 1.12 family's base (Debian bullseye, Python 3.9):
    the image's pip resolves a small requirement set, this machine fetches exactly those files."""
    request.getfixturevalue("docker_ready")
    fam = build._frameworks().family("1.12")
    base = build.base_tag(fam.suite)
    if build._image_id(base) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {base} is not built (.ci/setup builds it)")
        pytest.skip(f"{base} is not built (nox -s image -- --framework 1.12)")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "requirements.in").write_text(FOREIGN + "\n")
    (ctx / "build-only.in").write_text("wheel\n")
    (ctx / "constraints.in").write_text("")
    arts = build._resolve_in(base, ctx)
    assert {k.split("==")[0] for k in arts} >= {"markupsafe", "wheel"}  # and what wheel needs
    assert "-cp39-cp39-" in arts["markupsafe==2.1.5"].name  # chosen by the image's Python 3.9
    dest, old = tmp_path / "wheels", tmp_path / "wheels.old"
    old.mkdir()
    build._fetch(list(arts.values()), dest, old, say=lambda _: None)
    assert {p.name: _sha256(p) for p in dest.iterdir()} == {a.name: a.sha256 for a in arts.values()}
