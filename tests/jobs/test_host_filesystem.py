"""Process backend: a host sees a container's filesystem, not this machine's.

On SageMaker a training container has ``HOME=/root`` (the DLC runs as root; docker sets ``HOME``
from the user: https://docs.docker.com/reference/cli/docker/container/run/), an image's system
folders and nothing of the machine that submitted the job: none of its tokens (``~/.netrc``,
``~/.cache/huggingface/token``, ``~/.git-credentials``, ``~/.config/gh/hosts.yml``). This file
puts those files in the caller's home (only where none exists; removed afterwards) and checks
that neither a rank nor the toolkit's ``pip install -r requirements.txt`` step in the host finds
them. CI runs it as root (the suite) and as an ordinary user (``.ci/unprivileged``).
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import emulator
from emulator.cache import cache_dir

from ..rank_output import marked_json

MARKER = "tok-3c1f0e9b7a5d4e2f8a6b"
#: Relative to a home; each gets a line holding MARKER in its own format.
TOKEN_FILES = {
    ".netrc": f"machine example.invalid login emulator password {MARKER}\n",
    ".cache/huggingface/token": f"hf_{MARKER}\n",
    ".git-credentials": f"https://emulator:{MARKER}@example.invalid\n",
    ".config/gh/hosts.yml": f"github.com:\n    oauth_token: {MARKER}\n    user: emulator\n",
}

#: What a process reports about the caller's token files: by its own ``~`` and by absolute path.
PROBE = r"""
import json, os, socket
def probe(homes):
    found = {"host": socket.gethostname(), "home": os.path.expanduser("~"), "seen": {},
             "home_entries": sorted(os.listdir(os.path.expanduser("~")))}
    for home in dict.fromkeys([os.path.expanduser("~"), *homes]):
        for rel in RELS:
            p = os.path.join(home, rel)
            try:
                with open(p) as f:
                    found["seen"][p] = f.read()
            except OSError as e:
                if os.path.exists(p):
                    found["seen"][p] = "exists, unreadable: " + type(e).__name__
    try:
        open("/usr/lib/emulator-probe", "w").close()
        found["usr_writable"] = True
    except OSError:
        found["usr_writable"] = False
    return found
"""

TRAIN = PROBE + r"""
found = probe(HOMES_JSON)
pip_probe = "/tmp/pip-probe.json"
found["pip"] = json.load(open(pip_probe)) if os.path.exists(pip_probe) else None
print("PROBE " + json.dumps(found), flush=True)
"""

#: A PEP 517 backend inside the local requirement (no build requirements: pip in the host needs no
#: index): building the wheel, in the host's pip step, records what that step can read.
BACKEND = PROBE + r"""
import base64, hashlib, zipfile
HOMES = HOMES_JSON

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if socket.gethostname().startswith("algo-"):  # the host's pip step, not the emulator's own
        with open("/tmp/pip-probe.json", "w") as f:
            json.dump(probe(HOMES), f)
    name = "emulator_token_probe-0.1-py3-none-any.whl"
    files = {"emulator_token_probe.py": b"",
             "emulator_token_probe-0.1.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: emulator-token-probe\nVersion: 0.1\n",
             "emulator_token_probe-0.1.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: probe\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append("emulator_token_probe-0.1.dist-info/RECORD,,")
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for path, data in files.items():
            whl.writestr(path, data)
        whl.writestr("emulator_token_probe-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return name
"""


def _caller_homes() -> list[str]:
    """The caller's home by ``HOME`` and by the password database (they may differ)."""
    return list(dict.fromkeys([os.path.expanduser("~"), pwd.getpwuid(os.geteuid()).pw_dir]))


@pytest.fixture
def caller_tokens() -> Iterator[list[Path]]:
    """The token files in the caller's homes: made where none exists (removed afterwards, with
    the folders made for them); an existing one is left as it is (its content is not known, so
    the test checks that it is not seen at all)."""
    made: list[Path] = []
    paths: list[Path] = []
    try:
        for home in _caller_homes():
            for rel, text in TOKEN_FILES.items():
                path = Path(home, rel)
                paths.append(path)
                if path.exists():
                    continue
                missing = [p for p in reversed(path.parents) if not p.exists()]
                for folder in missing:
                    folder.mkdir(mode=0o700)
                    made.append(folder)
                path.write_text(text)
                path.chmod(0o600)
                made.append(path)
        yield paths
    finally:
        for p in reversed(made):
            if p.is_dir():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)


def test_no_rank_and_no_pip_step_sees_the_callers_files(tmp_path: Path, caller_tokens: list[Path]) -> None:
    homes = _caller_homes()
    rels = repr(list(TOKEN_FILES))
    src = tmp_path / "src"
    (src / "tokpkg").mkdir(parents=True)
    (src / "train.py").write_text(TRAIN.replace("RELS", rels).replace("HOMES_JSON", repr(homes)))
    (src / "tokpkg" / "probe_backend.py").write_text(
        BACKEND.replace("RELS", rels).replace("HOMES_JSON", repr(homes)))
    (src / "tokpkg" / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "probe_backend"\nbackend-path = ["."]\n')
    (src / "requirements.txt").write_text("./tokpkg\n")
    # Positive control: the probe finds the files on this machine (so a leak would be seen).
    namespace: dict[str, object] = {}
    exec(compile(PROBE.replace("RELS", rels), "probe", "exec"), namespace)
    here = namespace["probe"](homes)  # type: ignore[operator]
    assert set(here["seen"]) >= {str(p) for p in caller_tokens}, here

    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                          job_name="host-filesystem",
                          echo=False, stop_grace=2)
    assert result.status == "Completed", result.failure_reason
    for host in ("algo-1", "algo-2"):
        found = marked_json(result.log(host), "PROBE ")
        assert len(found) == 1, result.log(host)
        rank = found[0]
        assert rank["host"] == host and rank["home"] == "/root"
        assert rank["seen"] == {}, rank["seen"]
        assert rank["usr_writable"] is False  # the image's system folders are read-only
        pip = rank["pip"]
        assert pip is not None, "the toolkit's pip step did not build the local requirement in the host"
        assert pip["host"] == host and pip["seen"] == {}, pip
    everything = "\n".join(result.log(h) for h in ("algo-1", "algo-2"))
    assert MARKER not in everything


def test_home_is_empty_and_per_host(tmp_path: Path) -> None:
    """``HOME`` is ``/root``, empty but for the cluster's ``.ssh`` (what the MPI family needs) and
    the mount points of what the host runs that lives there (the job's interpreter, the emulator's
    cache holding the job environment); what a rank writes into it stays in its own host."""
    mine = f"mine-{uuid.uuid4().hex[:8]}"
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(
        "import json, os, socket\nhome = os.path.expanduser('~')\nbefore = sorted(os.listdir(home))\n"
        f"mine = {mine!r}\n"
        "open(os.path.join(home, mine), 'w').write(socket.gethostname())\n"
        "print('HOME ' + json.dumps({'home': home, 'before': before, 'after': sorted(os.listdir(home)),"
        " 'mine': open(os.path.join(home, mine)).read()}), flush=True)\n")
    result = emulator.run(entry_point="train.py", source_dir=src, instance_count=2, output_path=tmp_path / "out",
                          job_name="host-home", echo=False, stop_grace=2)
    assert result.status == "Completed", result.failure_reason
    # mount points of what the host runs from /root: the interpreter, and the job environment and
    # DLC view in the emulator's cache (~/.cache/sagemaker-emulator when HOME is /root)
    allowed = {".ssh"} | {Path(p).relative_to("/root").parts[0]
                          for p in [*_interpreter_paths(), os.path.realpath(cache_dir())] if p.startswith("/root/")}
    for host in ("algo-1", "algo-2"):
        [seen] = marked_json(result.log(host), "HOME ")
        assert seen["home"] == "/root"
        assert set(seen["before"]) <= allowed, seen
        assert mine not in seen["before"] and seen["mine"] == host
    for home in _caller_homes():
        assert not Path(home, mine).exists()


def _interpreter_paths() -> list[str]:
    import sys

    return [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
