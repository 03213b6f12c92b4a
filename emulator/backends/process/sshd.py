"""``sshd`` inside each emulated host (process backend): OpenSSH's as root, a stand-in otherwise.

The toolkit's MPI-family runners (``mpi``, ``smdistributed.dataparallel``, ``pytorchddp``) start
``/usr/sbin/sshd -D`` on every host, log in with paramiko (key authentication, port 22), and run
``mpirun``, whose ``orted`` daemons reach the other hosts through ``ssh``; the master then runs
``ssh HOST touch /tmp/done.algo-1``. A DLC image carries what that needs; this module gives each
emulated host the same, per job:

- ``/etc/ssh``: a per-job folder with one ed25519 host key shared by the cluster, an
  ``sshd_config`` (port 22, ``PermitRootLogin prohibit-password``, public keys only,
  ``UsePAM yes`` so that ``pam_env`` reads the host's ``/etc/environment`` as the toolkit's
  workers expect, ``StrictModes yes``, no pid file) and an ``ssh_config`` that trusts every
  host (``StrictHostKeyChecking no``, ``UserKnownHostsFile /dev/null``).
- ``~/.ssh`` of root (and of ``$HOME`` and the emulator's user if they differ): a per-job folder
  with the cluster's client key pair (``id_ed25519``), ``authorized_keys`` and ``config``. The
  machine's own ``~/.ssh`` is hidden, never read or written. (If a home has no ``.ssh``, an empty
  folder is created there as the mount point; nothing is written into it.)
- As root, OpenSSH's ``sshd`` runs, with ``/run/sshd`` a private tmpfs per host (its
  privilege-separation folder) and ``/etc/pam.d/sshd`` with ``pam_loginuid`` optional, as the
  DLC's Dockerfiles do.
- Not root, OpenSSH's ``sshd`` cannot run: an unprivileged user namespace denies ``setgroups``,
  so it can neither switch to its privilege-separation user nor log anyone in. A per-job wrapper
  that starts the stand-in ``emulator/inhost/site/_sm_emulator_sshd.py`` (real SSH through
  paramiko; its docstring lists what it does and does not emulate) with the job's interpreter is
  bind-mounted over ``/usr/sbin/sshd``, so the toolkit starts it unchanged. Inside the job's
  user namespace the process is uid 0, whose home is ``/root``: there the machine's ``/root``
  is replaced by an empty private tmpfs (an unprivileged user cannot enter it anyway) holding
  the per-job ``.ssh``, which OpenSSH's ``ssh`` client and the stand-in read.

All of it lives in the job's scratch folder (mode 0700) and is removed with it; keys are made per
job and never leave it.

Not emulated: the DLC's ``sshd`` configuration byte for byte (only the settings above are chosen
to match what the toolkit relies on). A machine without ``/usr/sbin/sshd`` gets neither (nothing
to mount over): the toolkit then fails with its own "SSH daemon not found", as SageMaker does
with an image that lacks sshd.
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from ...inhost import SITE
from ...inhost.protocol import SSH_DIR, SSH_PORT, SSHD

KEYGEN = "ssh-keygen"
SUBDIR = "ssh"
#: The stand-in program (runs inside hosts) and the per-job wrapper mounted over ``SSHD``.
STANDIN = SITE / "_sm_emulator_sshd.py"
STANDIN_WRAPPER = "sshd-standin"

SSHD_CONFIG = f"""\
# sshd_config of an emulated SageMaker host (sagemaker-cluster-emulator; per job)
Port {SSH_PORT}
ListenAddress 0.0.0.0
HostKey {SSH_DIR}/ssh_host_ed25519_key
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
    """True when hosts can run OpenSSH's sshd: root, ``/usr/sbin/sshd`` and ``ssh-keygen`` present."""
    return os.geteuid() == 0 and Path(SSHD).is_file() and shutil.which(KEYGEN) is not None


def standin_used() -> bool:
    """True when hosts get the sshd stand-in instead: not root, ``/usr/sbin/sshd`` there to be
    mounted over, ``ssh-keygen`` present."""
    return os.geteuid() != 0 and Path(SSHD).is_file() and shutil.which(KEYGEN) is not None


def _keygen(path: Path, comment: str) -> None:
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _pam_sshd(text: str) -> str:
    """``/etc/pam.d/sshd`` with ``pam_loginuid`` optional (as the DLC Dockerfiles do)."""
    return re.sub(r"(?m)^(session\s+)required(\s+pam_loginuid\.so)", r"\1optional\2", text)


def prepare(scratch: Path, *, python: str | None = None, env_home: str | None = None) -> Path:
    """Make the job's ssh material under ``scratch`` (keys and configs once per job; later calls
    reuse them), the stand-in's wrapper for ``python`` if given, and an empty ``.ssh`` mount point
    in each home that lacks one. Returns the folder :func:`mount_args` names."""
    root = scratch / SUBDIR
    done = root / ".ready"
    if not done.exists():
        etc, home = root / "etc-ssh", root / "dot-ssh"
        for d in (root, etc, home):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o700 if d != etc else 0o755)
        _keygen(etc / "ssh_host_ed25519_key", "sm-emulator-host")
        _keygen(home / "id_ed25519", "sm-emulator-cluster")
        (etc / "sshd_config").write_text(SSHD_CONFIG)
        (etc / "ssh_config").write_text(CLIENT_CONFIG)
        if Path("/etc/ssh/moduli").is_file():
            shutil.copyfile("/etc/ssh/moduli", etc / "moduli")
        (home / "config").write_text(CLIENT_CONFIG)
        shutil.copyfile(home / "id_ed25519.pub", home / "authorized_keys")
        for f in ("config", "authorized_keys"):
            (home / f).chmod(0o600)
        pam = Path("/etc/pam.d/sshd")
        if pam.is_file():
            (root / "pam-sshd").write_text(_pam_sshd(pam.read_text()))
        done.write_text("")
    if python is not None:
        wrapper = root / STANDIN_WRAPPER
        wrapper.write_text("#!/bin/sh\n# sshd stand-in of an emulated host (sagemaker-cluster-emulator; per job); "
                           "see emulator/inhost/site/_sm_emulator_sshd.py\n"
                           f"exec {shlex.quote(python)} {shlex.quote(str(STANDIN))} \"$@\"\n")
        wrapper.chmod(0o755)
    for folder in _homes(env_home):
        dot = Path(folder) / ".ssh"
        if not dot.exists():
            dot.mkdir(mode=0o700)
    return root


def _homes(env_home: str | None) -> list[str]:
    homes = [pwd.getpwuid(os.geteuid()).pw_dir]
    if env_home and env_home not in homes and Path(env_home).is_dir():
        homes.append(env_home)
    return homes


def mount_args(scratch: Path, *, env_home: str | None = None, standin: bool | None = None) -> list[str]:
    """The ``bwrap`` arguments that give a host ``/etc/ssh``, ``~/.ssh`` and OpenSSH's ``sshd``
    (:func:`available`) or the stand-in (:func:`standin_used`; ``standin=True`` forces it, for
    tests that compare the two as root); see the module docstring. Empty when neither applies.
    Pure: the files they name are made by :func:`prepare`."""
    if standin is None:
        standin = standin_used()
    root = scratch / SUBDIR
    dot_ssh = str(root / "dot-ssh")
    homes = _homes(env_home)
    if available() and not standin:
        args = ["--bind", str(root / "etc-ssh"), SSH_DIR, "--perms", "0755", "--tmpfs", "/run/sshd"]
        if Path("/etc/pam.d/sshd").is_file():
            args += ["--ro-bind", str(root / "pam-sshd"), "/etc/pam.d/sshd"]
    elif standin and Path(SSHD).is_file():
        args = ["--bind", str(root / "etc-ssh"), SSH_DIR, "--ro-bind", str(root / STANDIN_WRAPPER), SSHD]
        namespace_home = pwd.getpwuid(0).pw_dir  # the job's user namespace maps the emulator's user to uid 0
        if namespace_home not in homes:
            args += ["--perms", "0700", "--tmpfs", namespace_home, "--bind", dot_ssh, f"{namespace_home}/.ssh"]
    else:
        return []
    for home in homes:
        args += ["--bind", dot_ssh, str(Path(home) / ".ssh")]
    return args


def bwrap_args(scratch: Path, *, python: str, env_home: str | None = None,
               standin: bool | None = None) -> list[str]:
    """:func:`mount_args`, after :func:`prepare` made what they name (the stand-in run by ``python``)."""
    args = mount_args(scratch, env_home=env_home, standin=standin)
    if args:
        prepare(scratch, python=python, env_home=env_home)
    return args
