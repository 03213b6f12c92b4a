"""Real ``sshd`` inside each emulated host (process backend, when the emulator runs as root).

The toolkit's MPI-family runners (``mpi``, ``smdistributed.dataparallel``, ``pytorchddp``) start
``/usr/sbin/sshd -D`` on every host, log in with paramiko (key authentication, port 22), and run
``mpirun``, whose ``orted`` daemons reach the other hosts through ``ssh``. A DLC image carries
what that needs; this module gives each emulated host the same, per job:

- ``/etc/ssh``: a per-job folder with one ed25519 host key shared by the cluster, an
  ``sshd_config`` (port 22, ``PermitRootLogin prohibit-password``, public keys only,
  ``UsePAM yes`` so that ``pam_env`` reads the host's ``/etc/environment`` as the toolkit's
  workers expect, ``StrictModes yes``, no pid file) and an ``ssh_config`` that trusts every
  host (``StrictHostKeyChecking no``, ``UserKnownHostsFile /dev/null``).
- ``~/.ssh`` of root (and of ``$HOME`` if it differs): a per-job folder with the cluster's client
  key pair (``id_ed25519``), ``authorized_keys`` and ``config``. The machine's own ``~/.ssh`` is
  hidden, never read or written. (If the machine has no ``/root/.ssh``, an empty folder is created
  there as the mount point; nothing is written into it.)
- ``/run/sshd``: a private tmpfs per host (sshd's privilege-separation folder).

All of it lives in the job's scratch folder (mode 0700) and is removed with it; keys are made per
job and never leave it.

Not emulated: the DLC's ``sshd`` configuration byte for byte (only the settings above are
chosen to match what the toolkit relies on); ``pam_loginuid`` is made optional, as the DLC's
Dockerfiles do. Unavailable without root: an unprivileged user namespace cannot ``setgroups``,
so ``sshd`` cannot switch to its privilege-separation user or log anyone in; the process backend
then uses the namespace agent's socket instead (see :mod:`.nsagent`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

SSHD = "/usr/sbin/sshd"
KEYGEN = "ssh-keygen"
SUBDIR = "ssh"

SSHD_CONFIG = """\
# sshd_config of an emulated SageMaker host (sagemaker-cluster-emulator; per job)
Port 22
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM yes
StrictModes yes
PidFile none
UseDNS no
PrintMotd no
PrintLastLog no
X11Forwarding no
MaxStartups 100:30:200
MaxSessions 100
LogLevel ERROR
Subsystem sftp /usr/lib/openssh/sftp-server
"""

CLIENT_CONFIG = """\
# ssh client config of an emulated SageMaker host (sagemaker-cluster-emulator; per job)
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
"""


def available() -> bool:
    """True when hosts can run a real sshd: root, ``/usr/sbin/sshd`` and ``ssh-keygen`` present."""
    return os.geteuid() == 0 and Path(SSHD).is_file() and shutil.which(KEYGEN) is not None


def _keygen(path: Path, comment: str) -> None:
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _pam_sshd(text: str) -> str:
    """``/etc/pam.d/sshd`` with ``pam_loginuid`` optional (as the DLC Dockerfiles do)."""
    return re.sub(r"(?m)^(session\s+)required(\s+pam_loginuid\.so)", r"\1optional\2", text)


def prepare(root: Path, *, homes: Sequence[str]) -> None:
    """Make the job's ssh material in ``root`` (keys, configs) and the ``~/.ssh`` mount points
    of ``homes`` (once per job; later calls do nothing)."""
    for home in homes:
        dot = Path(home) / ".ssh"
        if Path(home).is_dir() and not dot.exists():
            dot.mkdir(mode=0o700)
    done = root / ".ready"
    if done.exists():
        return
    etc, dot_ssh = root / "etc-ssh", root / "dot-ssh"
    for d in (root, etc, dot_ssh):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700 if d != etc else 0o755)
    _keygen(etc / "ssh_host_ed25519_key", "sm-emulator-host")
    _keygen(dot_ssh / "id_ed25519", "sm-emulator-cluster")
    (etc / "sshd_config").write_text(SSHD_CONFIG)
    (etc / "ssh_config").write_text(CLIENT_CONFIG)
    if Path("/etc/ssh/moduli").is_file():
        shutil.copyfile("/etc/ssh/moduli", etc / "moduli")
    (dot_ssh / "config").write_text(CLIENT_CONFIG)
    shutil.copyfile(dot_ssh / "id_ed25519.pub", dot_ssh / "authorized_keys")
    for f in ("config", "authorized_keys"):
        (dot_ssh / f).chmod(0o600)
    pam = Path("/etc/pam.d/sshd")
    if pam.is_file():
        (root / "pam-sshd").write_text(_pam_sshd(pam.read_text()))
    done.write_text("")


def bwrap_args(root: Path, *, homes: Sequence[str]) -> list[str]:
    """``bwrap`` arguments that give a host ``/etc/ssh``, ``~/.ssh`` (of each of ``homes``) and
    ``/run/sshd`` from the material :func:`prepare` makes in ``root`` (see the module docstring).
    Pure; empty when :func:`available` is false."""
    if not available():
        return []
    args = ["--bind", str(root / "etc-ssh"), "/etc/ssh", "--perms", "0755", "--tmpfs", "/run/sshd"]
    if Path("/etc/pam.d/sshd").is_file():
        args += ["--ro-bind", str(root / "pam-sshd"), "/etc/pam.d/sshd"]
    for home in homes:
        args += ["--bind", str(root / "dot-ssh"), str(Path(home) / ".ssh")]
    return args
