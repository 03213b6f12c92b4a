"""Where hosts cannot run ``sshd`` (process backend, emulator not root): MPI launches without SSH.

Active only when ``EMULATOR_NO_SSHD=1`` (set by the process backend for MPI-family jobs when it
is not root: an unprivileged user namespace denies ``setgroups``, so ``sshd`` cannot run). The
job's namespace agent then serves a Unix socket in every host (``EMULATOR_AGENT_SOCKET``; see
``emulator/backends/nsagent.py``). This module is its client, used by

- ``bin/sm-emulator-rsh``, Open MPI's ``plm_rsh_agent`` in such hosts
  (``OMPI_MCA_plm_rsh_agent``): the toolkit's ``mpirun`` argv is unchanged, and ``orted`` is
  started in the target host as an ``ssh`` login would start it;
- post-import patches of ``sagemaker_training.mpi`` and ``sagemaker_training.smdataparallel``
  (:func:`patch`), replacing only the three functions that need ``sshd``:
  ``_start_sshd_daemon`` (registers the host with the agent instead of starting ``sshd -D``),
  ``_can_connect`` (asks the agent whether the host is up and "listening" instead of a paramiko
  key login) and ``_write_status_file`` (``touch`` through ``sm-emulator-rsh`` instead of
  ``ssh``). Everything else of the toolkit runs unchanged.

Not emulated: SSH itself (keys, host keys, port 22, ``SSH_*`` variables).
"""

from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
from types import ModuleType
from typing import Any

DEFAULT_SOCKET = "/dev/shm/.sm-emulator/agent.sock"
RSH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "sm-emulator-rsh")
MODULES = ("sagemaker_training.mpi", "sagemaker_training.smdataparallel")


def socket_path() -> str:
    return os.environ.get("EMULATOR_AGENT_SOCKET") or DEFAULT_SOCKET


def request(op: str, fds: tuple[int, ...] = (), timeout: float | None = 10.0,
            **fields: Any) -> dict[str, Any]:
    """Send one request to the agent and return its JSON reply (raises ``OSError``)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(socket_path())
        data = (json.dumps({"op": op, **fields}) + "\n").encode()
        if fds:
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            sock.sendall(data)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("the namespace agent closed the connection")
            reply += chunk
    return dict(json.loads(reply))


def rsh(argv: list[str]) -> int:
    """``sm-emulator-rsh [ssh options] HOST [COMMAND...]``: run COMMAND in HOST like ``ssh``
    (arguments joined with spaces, run by the login shell there); returns its exit code, 255 when
    the host cannot be reached."""
    takes_value = {"-o", "-p", "-l", "-i", "-F", "-E", "-b", "-c", "-e", "-m", "-O", "-S", "-W", "-w",
                   "-J", "-L", "-R", "-D", "-Q", "-B", "-I"}
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in takes_value else 1
    if i >= len(argv):
        print("usage: sm-emulator-rsh [options] host [command]", file=sys.stderr)
        return 255
    host, command = argv[i], " ".join(argv[i + 1:])
    try:
        reply = request("run", fds=(0, 1, 2), timeout=None, host=host, command=command)
    except OSError as exc:
        print(f"sm-emulator-rsh: connect to host {host}: {exc}", file=sys.stderr)
        return 255
    if reply.get("error"):
        print(reply["error"], file=sys.stderr)
    return int(reply.get("code", 255))


def _start_sshd_daemon() -> None:
    """Stand-in for the toolkit's ``sshd -D``: the agent marks this host as accepting logins."""
    try:
        request("listen")
    except OSError as exc:
        print(f"[emulator] could not register with the namespace agent: {exc}", file=sys.stderr, flush=True)


def _make_can_connect(module: ModuleType) -> Any:
    def _can_connect(host: str, port: int = 22) -> bool:
        """Stand-in for the toolkit's paramiko login: true when ``host`` runs and its
        ``_start_sshd_daemon`` has been called, as a real login succeeds once ``sshd`` listens."""
        logger = module.logger
        try:
            ok = bool(request("ready", host=str(host)).get("ok"))
        except (OSError, ValueError):
            ok = False
        if ok:
            logger.info("Can connect to host %s", host)
        else:
            logger.info("Cannot connect to host %s", host)
        return ok

    return _can_connect


def _make_write_status_file(module: ModuleType) -> Any:
    def _write_status_file(host: str, status_file: str) -> bool:
        """The toolkit's ``ssh HOST touch FILE``, with ``sm-emulator-rsh`` in place of ``ssh``."""
        logger = module.logger
        try:
            logger.info(f"Start writing mpirun finished status to {host}")
            output = subprocess.run([RSH, str(host), "touch", f"{status_file}"],
                                    capture_output=True, text=True, check=True)
            logger.info(f"output from subprocess run {output}")
            logger.info("Finished writing status file")
            return True
        except subprocess.CalledProcessError:
            logger.info(f"Cannot connect to {host}")
            return False

    return _write_status_file


def patch(module: ModuleType) -> None:
    """Replace the toolkit module's three ``sshd``-bound functions (see the module docstring)."""
    if getattr(module, "_sm_emulator_nosshd", False):
        return
    module._start_sshd_daemon = _start_sshd_daemon  # type: ignore[attr-defined]
    module._can_connect = _make_can_connect(module)  # type: ignore[attr-defined]
    module._write_status_file = _make_write_status_file(module)  # type: ignore[attr-defined]
    module._sm_emulator_nosshd = True  # type: ignore[attr-defined]
    print(f"[emulator] {module.__name__}: no sshd in hosts (not root): _start_sshd_daemon, "
          "_can_connect and _write_status_file go through the namespace agent; mpirun reaches "
          "other hosts through OMPI_MCA_plm_rsh_agent=sm-emulator-rsh (a difference from SageMaker)",
          file=sys.stderr, flush=True)
