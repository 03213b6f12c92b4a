"""The sshd stand-in (``emulator/inhost/site/_sm_emulator_sshd.py``) behaves like OpenSSH's sshd for
what the SageMaker toolkit, Open MPI and users rely on.

Each case starts a host-like sandbox (``unshare``, then ``bwrap`` with exactly the ssh mounts the
process backend gives a host: ``emulator.backends.process.sshd.bwrap_args``), starts ``/usr/sbin/sshd -D``
in it as the toolkit does, and drives it with OpenSSH's ``ssh`` client and the real toolkit's
``_can_connect`` / ``_write_status_file``. The oracle is OpenSSH's sshd itself: as root both run
on the same inputs and must give the same results (``test_standin_matches_openssh``). The fixed
expectations (``EXPECTED_ENV`` ...) were read from OpenSSH 9.2p1 + Linux-PAM 1.5.2 (Debian 12)
and are re-checked against the real sshd by that test whenever it runs as root; without root the
stand-in alone is checked against them (CI runs this file as an ordinary user through
``.ci/unprivileged``, where the process backend uses the stand-in).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.backends.process import sshd

from ..conftest import require
from ..rank_output import marked_json


@pytest.fixture(autouse=True)
def _tools() -> None:
    """Skips locally, fails under ``CI=true`` (``require`` in conftest.py)."""
    require("the sshd stand-in", [what for what, ok in (
        ("bwrap", shutil.which("bwrap")), ("openssh-client (ssh)", shutil.which("ssh")),
        ("openssh-client (ssh-keygen)", shutil.which("ssh-keygen")),
        (f"openssh-server ({sshd.SSHD} is the mount point)", Path(sshd.SSHD).is_file())) if not ok])

#: /etc/environment of the sandbox: what pam_env makes of it is the interesting part.
ENVIRONMENT = (
    b"A=1\n"
    b'B="two words"\n'
    b"export C=3\n"
    b"D=has#hash\n"
    b"  E = 5\n"
    b"F=x\\\n"
    b"  y\n"
    b"# a comment\n"
    b"\n"
    b"G\n"
    b'H="in"side"\n'
    b"I='q\n"
    b"J=trail  \n"
    b"K=a=b\n"
    b"Z=1\n"
    b"Z\n"
    b"PATH=/usr/local/bin:/usr/bin:/bin:/from/environment\n"
    b"SSH_CONNECTION=from-environment\n"
    b"USER=from-environment\n"
    b"HOME=/nonexistent-home\n"  # so bash -c, run by sshd, finds no ~/.bashrc of this machine
    b"SM_JSON={\"a\": [1, 2], \"b\": \"x y\"}\n"
    b"LONG=" + b"x" * 9000 + b"\n"
    b"AFTER_LONG=1\n"
)
#: What a login sees of it (plus sshd's own variables); from OpenSSH 9.2p1 + Linux-PAM 1.5.2.
EXPECTED_ENV = {
    "A": "1", "B": "two words", "C": "3", "D": "has", "F": "x  y", "H": 'in"side', "I": "q",
    "J": "trail  ", "K": "a=b", "PATH": "/usr/local/bin:/usr/bin:/bin:/from/environment",
    "USER": "from-environment", "HOME": "/nonexistent-home", "SM_JSON": '{"a": [1, 2], "b": "x y"}',
    # pam_motd's marker; sshd's own LOGNAME and SHELL of uid 0 (root, in the job's namespace when
    # not root); bash's PWD (sshd's cwd: the passwd home, not $HOME), SHLVL and _.
    "MOTD_SHOWN": "pam", "LOGNAME": "root", "SHELL": "/bin/bash",
    "PWD": "/root", "SHLVL": "0", "_": "/usr/bin/env",
}

DRIVER = r'''
import json, os, socket, subprocess, sys, time
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
daemon = subprocess.Popen(["/usr/sbin/sshd", "-D"], stderr=subprocess.PIPE)
while True:
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=5).close()
        break
    except OSError:
        if daemon.poll() is not None:
            print(json.dumps({"error": daemon.stderr.read().decode()}))
            sys.exit(1)
        time.sleep(0.05)

def run(argv, stdin=b"", env=None):
    p = subprocess.run(argv, input=stdin, capture_output=True, timeout=120, env=env)
    return {"rc": p.returncode, "out": p.stdout.decode(errors="replace"), "err": p.stderr.decode(errors="replace")}

out = {}
out["exit"] = run(["ssh", "127.0.0.1", "echo out; echo err >&2; exit 3"])
out["signal"] = run(["ssh", "127.0.0.1", "kill -TERM $$"])
out["stdin"] = run(["ssh", "127.0.0.1", "cat; echo ."], stdin=b"line 1\nline 2")
out["cwd"] = run(["ssh", "127.0.0.1", "pwd; echo $0"])
env = run(["ssh", "127.0.0.1", "/usr/bin/env -0"])
out["env"] = dict(item.split("=", 1) for item in env["out"].split("\0") if item)
subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", "/tmp/wrong/.ssh/id_ed25519"],
               check=True, stdout=subprocess.DEVNULL)
out["wrong_key"] = run(["ssh", "-o", "IdentitiesOnly=yes", "-i", "/tmp/wrong/.ssh/id_ed25519", "127.0.0.1", "true"])
out["unknown_user"] = run(["ssh", "nobody@127.0.0.1", "true"])
probe = "from sagemaker_training import mpi; print(mpi._can_connect('127.0.0.1'))"
out["probe"] = run([sys.executable, "-c", probe])["out"].strip()
out["probe_wrong_key"] = run([sys.executable, "-c", probe], env={**os.environ, "HOME": "/tmp/wrong"})["out"].strip()
status = "from sagemaker_training import mpi; print(mpi._write_status_file('127.0.0.1', '/tmp/done.algo-1'))"
out["status_file"] = [run([sys.executable, "-c", status])["out"].strip(), os.path.exists("/tmp/done.algo-1")]
print("DRIVER-RESULT " + json.dumps(out), flush=True)
'''


def _keep_under_tmp() -> list[str]:
    """Binds that keep this interpreter and checkout visible under the sandbox's empty /tmp (a clone
    under /tmp, e.g. /tmp/fresh-check, has its .nox venv there)."""
    keep = {os.path.realpath(sys.prefix), str(Path(__file__).resolve().parents[2])}
    return [arg for path in sorted(keep) if path.startswith("/tmp/") for arg in ("--bind", path, path)]


def _sandbox(tmp_path: Path, *, standin: bool) -> dict[str, Any]:
    """Run :data:`DRIVER` in a host-like sandbox with OpenSSH's sshd or the stand-in."""
    scratch = tmp_path / ("standin" if standin else "openssh")
    scratch.mkdir()
    environment = scratch / "environment"
    environment.write_bytes(ENVIRONMENT)
    args = sshd.bwrap_args(scratch, python=sys.executable, env_home=os.environ.get("HOME"), standin=standin)
    assert args, "no ssh mounts for this sandbox"
    user_ns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    argv = ["unshare", *user_ns, "--net", "--", "bwrap", "--dev-bind", "/", "/", "--unshare-pid",
            "--die-with-parent", "--tmpfs", "/tmp", *_keep_under_tmp(), "--dir", "/tmp/wrong/.ssh",
            "--bind", str(environment), "/etc/environment", *args, "--", sys.executable, "-c", DRIVER]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "PYTEST_"))}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    # sshd -D shares the sandbox's stdout: the report is found by its marker, not as the last line
    [report] = marked_json(done.stdout, "DRIVER-RESULT ")
    return dict(report)


def _check(result: dict[str, Any]) -> None:
    assert result["exit"] == {"rc": 3, "out": "out\n", "err": "err\n"}
    assert result["signal"]["rc"] == 255 and result["signal"]["out"] == ""  # no exit status: ssh says 255
    assert result["stdin"] == {"rc": 0, "out": "line 1\nline 2.\n", "err": ""}
    assert result["cwd"] == {"rc": 0, "out": "/root\nbash\n", "err": ""}  # home of uid 0; shell -c
    env = dict(result["env"])
    client, connection = env.pop("SSH_CLIENT"), env.pop("SSH_CONNECTION")
    port = client.split()[1]
    assert client == f"127.0.0.1 {port} 22" and connection == f"127.0.0.1 {port} 127.0.0.1 22"
    for name in ("TZ", "LANG", "LC_ALL"):  # only present when the machine sets them
        env.pop(name, None)
    assert env == EXPECTED_ENV
    for case in ("wrong_key", "unknown_user"):
        assert result[case]["rc"] == 255 and "Permission denied (publickey)" in result[case]["err"], result[case]
    assert result["probe"] == "True" and result["probe_wrong_key"] == "False"  # the toolkit's paramiko login
    assert result["status_file"] == ["True", True]  # the toolkit's `ssh HOST touch FILE`


def test_standin(tmp_path: Path) -> None:
    _check(_sandbox(tmp_path, standin=True))


@pytest.mark.skipif(not sshd.available(), reason="OpenSSH's sshd runs only as root (the oracle)")
def test_standin_matches_openssh(tmp_path: Path) -> None:
    real, standin = _sandbox(tmp_path, standin=False), _sandbox(tmp_path, standin=True)

    def without_ports(result: dict[str, Any]) -> dict[str, Any]:  # the client's port differs per connection
        env = {k: " ".join(v.split()[:1] + v.split()[2:]) if k in ("SSH_CLIENT", "SSH_CONNECTION") else v
               for k, v in result["env"].items()}
        return {**result, "env": env}

    assert without_ports(standin) == without_ports(real)
    _check(real)


def test_mounts(tmp_path: Path) -> None:
    """OpenSSH's sshd as root; otherwise the stand-in's wrapper over /usr/sbin/sshd, run by the
    job's interpreter, and uid 0's home (the job's namespace maps the emulator's user to uid 0)
    replaced by a private folder holding the per-job ~/.ssh."""
    planned = sshd.mount_args(tmp_path, standin=True)
    assert not any(tmp_path.iterdir())  # mount_args is pure: prepare() makes what it names
    standin = sshd.bwrap_args(tmp_path, python="/opt/py/bin/python3", standin=True)
    assert standin == planned
    wrapper = Path(standin[standin.index(sshd.SSHD) - 1])
    assert standin[standin.index(sshd.SSHD) - 2] == "--ro-bind"
    assert wrapper.read_text().splitlines()[-1] == f'exec /opt/py/bin/python3 {sshd.STANDIN} "$@"'
    assert os.access(wrapper, os.X_OK) and "/run/sshd" not in standin
    dot_ssh = str(tmp_path / "ssh" / "dot-ssh")
    if os.geteuid() != 0:
        assert standin[standin.index("/root") - 3:standin.index("/root") + 3] == [
            "--perms", "0700", "--tmpfs", "/root", "--bind", dot_ssh]
    etc_ssh = str(tmp_path / "ssh" / "etc-ssh")
    assert standin[standin.index(sshd.SSH_DIR) - 2:standin.index(sshd.SSH_DIR)] == ["--bind", etc_ssh]
    automatic = sshd.bwrap_args(tmp_path, python="/opt/py/bin/python3")
    if sshd.available():
        assert sshd.SSHD not in automatic and "/run/sshd" in automatic and ["--bind", dot_ssh, "/root/.ssh"] == \
            automatic[automatic.index("/root/.ssh") - 2:automatic.index("/root/.ssh") + 1]
    else:
        assert automatic == standin
