"""``python -m emulator cache [prune]`` (emulator/backends/store.py) on a cache tree made here: what
it lists, what ``prune`` removes, and that what a process uses or a lock holds stays. No engine:
the tree's folders only (``_engine_facts`` says there is none, as on a machine without docker);
images are tested against a real engine in tests/docker/test_store_images.py."""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.backends import jobenv, layers, store
from emulator.errors import RequestError

DAY = 86400.0


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder as jobs leave it: a usable environment that sees one layer, one whose
    interpreter is gone, a half-made layer, a wheelhouse and the local S3; all used 10 days ago."""
    monkeypatch.setattr(store, "_engine_facts", lambda: (None, {}, {}))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = tmp_path / "sagemaker-emulator"
    layer = root / "frameworks" / "base-abc"
    (layer / "torch").mkdir(parents=True)
    (layer / "torch" / "__init__.py").write_text("x" * 5000)
    (root / "frameworks" / "image-def.part").mkdir()
    for name, origin in (("env-live", sys.prefix), ("env-gone", str(tmp_path / "no-such-venv"))):
        site = root / "envs" / name / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True)
        (site / jobenv.PTH).write_text(layers.addsitedir_line(layer) if name == "env-live" else "")
        (root / "envs" / name / jobenv.ORIGIN).write_text(origin)
        (root / "envs" / f"{name}.lock").write_text("")
    (root / "wheelhouse" / "wh-1").mkdir(parents=True)
    (root / "s3" / "bucket").mkdir(parents=True)
    old = time.time() - 10 * DAY
    for p in root.rglob("*"):
        os.utime(p, (old, old))
    return root


def _by_where(root: Path) -> dict[str, store.Entry]:
    return {str(Path(e.where).relative_to(root)): e for e in store.entries(cache=root)}


def test_the_list_names_each_kind_with_its_size_and_last_use(tree: Path) -> None:
    found = _by_where(tree)
    assert {k: e.kind for k, e in found.items()} == {
        "envs/env-live": "environment", "envs/env-gone": "environment", "frameworks/base-abc": "layer",
        "frameworks/image-def.part": "layer", "wheelhouse/wh-1": "wheelhouse", "s3": "s3"}
    assert found["frameworks/base-abc"].size >= 5000  # du's blocks: at least the file's bytes
    assert {k for k, e in found.items() if e.unusable} == {"envs/env-gone", "frameworks/image-def.part"}
    now = time.time()
    os.utime(tree / "envs" / "env-live.lock", (now, now))  # a job opened the environment just now
    found = _by_where(tree)
    assert found["frameworks/base-abc"].last_use == pytest.approx(now)  # seen by that environment
    text = store.render(list(found.values()))
    assert "environment" in text and "10 d ago" in text and text.splitlines()[-1].startswith("total ")


def test_prune_removes_only_what_nothing_can_use(tree: Path) -> None:
    out = io.StringIO()
    assert store.main(["prune"], out) == 0
    assert not (tree / "envs" / "env-gone").exists() and not (tree / "frameworks" / "image-def.part").exists()
    assert (tree / "envs" / "env-live").is_dir() and (tree / "frameworks" / "base-abc").is_dir()
    assert (tree / "wheelhouse" / "wh-1").is_dir() and "removed environment" in out.getvalue()


def test_older_than_removes_what_was_not_used_since(tree: Path) -> None:
    now = time.time()
    os.utime(tree / "wheelhouse" / "wh-1", (now, now))
    assert store.main(["prune", "--older-than", "5d"], io.StringIO()) == 0
    assert (tree / "wheelhouse" / "wh-1").is_dir()  # used just now
    assert not (tree / "envs" / "env-live").exists() and not (tree / "frameworks" / "base-abc").exists()
    assert (tree / "s3" / "bucket").is_dir()  # never pruned: the jobs' outputs


def test_what_a_process_uses_or_a_lock_holds_is_kept_and_named(tree: Path) -> None:
    held = tree / "envs" / "env-live" / "lib" / "python3.11" / "site-packages" / jobenv.PTH
    user = subprocess.Popen([sys.executable, "-c", f"f = open({str(held)!r}); import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        with open(tree / "wheelhouse" / "wh-1.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # being resolved right now
            for _ in range(100):  # until the process has opened the file
                if any(p == str(held) for p in store.open_paths()):
                    break
                time.sleep(0.05)
            out = io.StringIO()
            assert store.main(["prune", "--all"], out) == 0
        text = out.getvalue()
        assert f"pid {user.pid} python" in text and "being made" in text, text
        assert (tree / "envs" / "env-live").is_dir() and (tree / "wheelhouse" / "wh-1").is_dir()
        assert (tree / "frameworks" / "base-abc").is_dir()  # the environment in use sees it
        assert "in use by environment env-live" in text
        assert not (tree / "envs" / "env-gone").exists()
    finally:
        user.communicate(b"", timeout=30)


def test_a_bad_duration_is_refused_naming_the_option() -> None:
    assert store.parse_duration("90m") == 5400 and store.parse_duration("2w") == 14 * DAY
    assert store.parse_duration("45") == 45
    with pytest.raises(RequestError) as err:
        store.parse_duration("soon")
    assert err.value.field == "--older-than" and "30d" in str(err.value)


def test_the_command_lists_and_refuses_prune_options_without_prune(tree: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tree.parent), "DOCKER_HOST": f"unix://{tree}/no-engine.sock",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    listed = subprocess.run([sys.executable, "-m", "emulator", "cache"], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert listed.returncode == 0 and "frameworks/base-abc" in listed.stdout, listed.stderr
    bad = subprocess.run([sys.executable, "-m", "emulator", "cache", "--all"], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "go with prune" in bad.stderr and (tree / "envs" / "env-live").is_dir()
