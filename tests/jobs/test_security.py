"""Security: hosts do not get the user's AWS credentials (unless asked), nothing of a job listens
on the machine's real interfaces, and archive extraction refuses path traversal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from emulator.cache import cache_dir
from emulator.job.archives import safe_extract

from ..conftest import import_or_skip, listening_sockets
from ..rank_output import marked_json

ENV_KEY = "AKIAQAEMULATORENVKEY"
ENV_SECRET = "env-secret-3f9a1c77e0b24d5e9a8b6c5d4e3f2a1b0c9d8e7f"
FILE_KEY = "AKIAQAEMULATORFILEKY"
FILE_SECRET = "file-secret-0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d"

PROBE = r"""
import json, os, pathlib, socket
found = {"host": socket.gethostname()}
found["env"] = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
home = pathlib.Path(os.path.expanduser("~"))
found["home"] = str(home)
for name in ("credentials", "config"):
    p = home / ".aws" / name
    try:
        found["file_" + name] = p.read_text()
    except OSError as e:
        found["file_" + name] = "unreadable: " + type(e).__name__
try:
    import boto3
    creds = boto3.session.Session().get_credentials()
    found["boto3"] = None if creds is None else {"access_key": creds.access_key,
                                                  "secret_key": creds.secret_key,
                                                  "method": creds.method}
except Exception as e:
    found["boto3"] = "error: " + type(e).__name__ + ": " + str(e)[:200]
print("PROBE " + json.dumps(found), flush=True)
"""


def _probe_job(tmp_path: Path, *, forward: bool) -> tuple[dict[str, dict], Path]:
    import_or_skip("boto3")
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = {FILE_KEY}\naws_secret_access_key = {FILE_SECRET}\n")
    (home / ".aws" / "config").write_text("[default]\nregion = eu-west-1\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "probe.py").write_text(PROBE)
    out = tmp_path / "out"
    job = f"qa-sec-{uuid.uuid4().hex[:6]}"
    # the fake HOME is about the user's files; the machine's framework layers (GBs, minutes to
    # install) stay where they are: XDG_CACHE_HOME names them, as a user who sets it would
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(cache_dir().parent), "AWS_ACCESS_KEY_ID": ENV_KEY,
           "AWS_SECRET_ACCESS_KEY": ENV_SECRET, "AWS_SESSION_TOKEN": "qa-session-token-xyz"}
    argv = [sys.executable, "-m", "emulator", "run", "--entry-point", "probe.py", "--source-dir", str(src),
            "--hosts", "2", "--output-dir", str(out), "--job-name", job, "--quiet"]
    if forward:
        argv.append("--forward-aws-credentials")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    found = {}
    for host in ("algo-1", "algo-2"):
        log = (out / job / "logs" / f"{host}.log").read_text(errors="replace")
        [found[host]] = marked_json(log, "PROBE ")
    return found, out / job


def _all_text(root: Path) -> str:
    parts = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if p.suffix == ".gz":
                with tarfile.open(p) as tar:
                    for m in tar.getmembers():
                        f = tar.extractfile(m) if m.isfile() else None
                        if f is not None:
                            parts.append(f.read().decode(errors="replace"))
            else:
                parts.append(data.decode(errors="replace"))
    return "\n".join(parts)


def test_hosts_do_not_see_the_users_aws_credentials(tmp_path: Path) -> None:
    found, job_dir = _probe_job(tmp_path, forward=False)
    for host, f in found.items():
        assert f["host"] == host
        assert "AWS_ACCESS_KEY_ID" not in f["env"] and "AWS_SECRET_ACCESS_KEY" not in f["env"]
        assert "AWS_SESSION_TOKEN" not in f["env"]
        assert f["file_credentials"].startswith("unreadable") or FILE_SECRET not in f["file_credentials"]
        assert f["boto3"] is None, f["boto3"]  # the whole credential chain finds nothing
    everything = _all_text(job_dir)
    # Positive control: the probe output is in the job's files, so a leak would be seen here.
    assert "PROBE " in everything
    for secret in (ENV_KEY, ENV_SECRET, FILE_KEY, FILE_SECRET, "qa-session-token-xyz"):
        assert secret not in everything


def test_forwarded_credentials_arrive(tmp_path: Path) -> None:
    found, job_dir = _probe_job(tmp_path, forward=True)
    for f in found.values():
        assert f["env"].get("AWS_ACCESS_KEY_ID") == ENV_KEY
        assert f["env"].get("AWS_SECRET_ACCESS_KEY") == ENV_SECRET
        assert isinstance(f["boto3"], dict) and f["boto3"]["access_key"] == ENV_KEY
        assert f["boto3"]["method"] == "env"
    description = (job_dir / "job.json").read_text()
    assert ENV_SECRET not in description  # never written into the job description


LISTENER = r"""
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {port}))
s.listen()
print("LISTENING", flush=True)
time.sleep(8)
"""


def test_nothing_of_the_job_listens_on_the_machines_interfaces(tmp_path: Path) -> None:
    port = 20000 + os.getpid() % 20000
    hexport = f":{port:04X}"
    assert not any(addr.endswith(hexport) for addr, _ in listening_sockets()), "port already in use"
    src = tmp_path / "src"
    src.mkdir()
    (src / "listen.py").write_text(LISTENER.replace("{port}", str(port)))
    job = f"qa-listen-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator", "run", "--entry-point", "listen.py", "--source-dir", str(src),
         "--hosts", "2", "--output-dir", str(out), "--job-name", job, "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        logs = [out / job / "logs" / f"algo-{i}.log" for i in (1, 2)]
        deadline = time.monotonic() + 90
        while not all(p.exists() and "LISTENING" in p.read_text() for p in logs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "hosts never listened"
            time.sleep(0.1)
        machine = listening_sockets()
        assert not any(addr.endswith(hexport) for addr, _ in machine), machine
        # Positive control: the sockets exist, inside the hosts' own network namespaces.
        inside = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if f"TRAINING_JOB_NAME={job}".encode() not in Path(f"/proc/{entry}/environ").read_bytes():
                    continue
                table = Path(f"/proc/{entry}/net/tcp").read_text()
            except OSError:
                continue
            if any(line.split()[1].endswith(hexport) and line.split()[3] == "0A"
                   for line in table.splitlines()[1:]):
                inside += 1
        assert inside >= 2
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


# --------------------------------------------------------------------------------------------
# safe_extract


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), b"pwned\n"


def _link(name: str, target: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def _device(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info, None


EVIL = {
    "dotdot": [_file("../escaped.txt")],
    "nested-dotdot": [_file("a/b/../../../escaped.txt")],
    "symlink-out-then-write": [_link("link", "{outside}", tarfile.SYMTYPE), _file("link/escaped.txt")],
    "hardlink-out": [_link("hard", "{outside}/victim.txt", tarfile.LNKTYPE)],
    "device": [_device("null")],
}


@pytest.mark.parametrize("name", sorted(EVIL))
def test_safe_extract_refuses_traversal(tmp_path: Path, name: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("original\n")
    members = []
    for info, data in EVIL[name]:
        info.name = info.name.replace("{outside}", str(outside))
        info.linkname = info.linkname.replace("{outside}", str(outside))
        members.append((info, data))
    archive = _tar(tmp_path / "evil.tar.gz", members)
    dest = tmp_path / "dest"
    with pytest.raises(tarfile.TarError):
        safe_extract(archive, dest)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_text() == "original\n"
    assert not (tmp_path / "escaped.txt").exists()


def test_safe_extract_keeps_absolute_members_inside_dest(tmp_path: Path) -> None:
    """An absolute member name is made relative (tarfile's ``data`` filter), never written at its
    absolute path."""
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = _tar(tmp_path / "abs.tar.gz", [_file(f"{outside}/escaped.txt")])
    dest = tmp_path / "dest"
    safe_extract(archive, dest)
    assert list(outside.iterdir()) == []
    assert (dest / str(outside).lstrip("/") / "escaped.txt").read_bytes() == b"pwned\n"


def test_safe_extract_extracts_an_ordinary_archive(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar.gz", [_file("code/train.py"), _link("code/alias.py", "train.py",
                                                                           tarfile.SYMTYPE)])
    safe_extract(archive, tmp_path / "dest")
    assert (tmp_path / "dest" / "code" / "train.py").read_bytes() == b"pwned\n"
    assert (tmp_path / "dest" / "code" / "alias.py").resolve() == (tmp_path / "dest" / "code" / "train.py")
