"""The job's namespace agent: PID 1 of one job's user+net+pid namespaces (process backend).

Started by :mod:`emulator.backends.process` through ``unshare``; it owns the job's bridge and
starts each host with ``bwrap`` (own net, UTS, mount and PID namespaces), wiring a veth pair so
the host sees ``eth0`` with its own address. It speaks JSON lines: commands on stdin, events on
stdout. When stdin closes (the emulator exited or was killed) it exits, and because it is PID 1
of the job's PID namespace the kernel kills every process of every host with it: nothing of a
job can outlive its emulator.

When the emulator is not root, hosts cannot run ``sshd`` (an unprivileged user namespace denies
``setgroups``), so for MPI-family jobs the agent also serves a Unix socket (``--serve PATH``),
bind-mounted into every host, through which code in a host can (see :func:`serve`):

- ``run``: run a command in another host, as an ``ssh`` login would (the target's login shell
  with ``-c``, an environment built like ``sshd`` + ``pam_env`` from the target's
  ``/etc/environment``, cwd ``$HOME``), with the caller's stdin/stdout/stderr passed over the
  socket and the exit code sent back. ``emulator/inhost/bin/sm-emulator-rsh`` uses it as
  Open MPI's ``plm_rsh_agent``;
- ``listen``: mark the calling host as accepting logins (the stand-in for ``sshd -D``);
- ``ready``: whether a host accepts logins (the stand-in for the toolkit's paramiko probe).

Not emulated by the socket: SSH itself (keys, ``SSH_*`` variables, ``AcceptEnv``, the session's
pseudo-terminal and ``SIGHUP`` on disconnect; a closed connection kills the command's process
group instead).

Runs with only the standard library and ``ip``/``nsenter``/``bwrap``; imports nothing else.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

BRIDGE = "br0"
_lock = threading.Lock()
_hosts: dict[str, int] = {}  # host → pid (in this namespace) of its PID 1
_exited: set[str] = set()
_addresses: dict[str, str] = {}  # eth0 address → host
_listening: set[str] = set()  # hosts whose sshd stand-in "runs" (no-sshd mode)
_disconnected: set[str] = set()
#: ``sshd``'s default ``PATH`` (Debian), before ``pam_env`` applies ``/etc/environment``.
SSHD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def emit(event: str, **fields: Any) -> None:
    with _lock:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def setup_bridge() -> None:
    ip("link", "set", "lo", "up")
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("link", "set", BRIDGE, "up")


def start_host(cmd: dict[str, Any]) -> None:
    host, index = cmd["host"], cmd["index"]
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    argv = [a.replace("{INFO_FD}", str(info_w)).replace("{BLOCK_FD}", str(block_r)) for a in cmd["argv"]]
    log = open(cmd["log"], "ab", buffering=0)  # noqa: SIM115 - closed right after the fork
    try:
        proc = subprocess.Popen(argv, env=cmd["env"], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=(info_w, block_r))
    finally:
        log.close()
        os.close(info_w)
        os.close(block_r)
    text = ""
    with os.fdopen(info_r) as info:
        for line in info:  # bwrap writes a small multi-line JSON object
            text += line
            if line.startswith("}"):
                break
    try:
        child = int(json.loads(text)["child-pid"])
    except (ValueError, KeyError):
        os.close(block_w)
        proc.wait()
        emit("exited", host=host, code=proc.returncode, error="bwrap failed to start the host")
        return
    veth = f"veth{index}"
    try:
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(child))
        ip("link", "set", veth, "master", BRIDGE, "up")
        inside = ["nsenter", "-t", str(child), "-n", "ip"]
        for args in (["link", "set", "lo", "up"], ["addr", "add", cmd["cidr"], "dev", "eth0"],
                     ["link", "set", "eth0", "up"]):
            subprocess.run(inside + args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except subprocess.CalledProcessError as exc:
        # Most often the host died during its own set-up (bwrap's reason is in its log).
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(block_w)
        code = proc.wait()
        _exited.add(host)
        emit("exited", host=host, code=code if code else 1,
             error=f"network set-up failed: {exc.stderr.decode(errors='replace').strip()}")
        return
    _hosts[host] = child
    _addresses[cmd["cidr"].split("/")[0]] = host
    os.write(block_w, b"1")
    os.close(block_w)
    emit("started", host=host, pid=child)

    def wait() -> None:
        code = proc.wait()
        _exited.add(host)
        emit("exited", host=host, code=code)

    threading.Thread(target=wait, daemon=True).start()


def handle(cmd: dict[str, Any]) -> bool:
    op = cmd["op"]
    if op == "start":
        start_host(cmd)
    elif op == "signal":
        pid = _hosts.get(cmd["host"])
        if pid is not None and cmd["host"] not in _exited:
            try:
                os.kill(pid, int(cmd["sig"]))
            except ProcessLookupError:
                pass
    elif op == "disconnect":
        _disconnected.add(cmd["host"])
        ip("link", "set", f"veth{cmd['index']}", "down")
        ip("link", "set", f"veth{cmd['index']}", "nomaster")
    elif op == "exit":
        return False
    return True


def _alive(host: str) -> bool:
    return host in _hosts and host not in _exited and host not in _disconnected


def _host_of_pid(pid: int) -> str | None:
    """The host whose PID namespace holds ``pid`` (a PID of this namespace), if any."""
    try:
        target = os.readlink(f"/proc/{pid}/ns/pid")
        for host, root in _hosts.items():
            if os.readlink(f"/proc/{root}/ns/pid") == target:
                return host
    except OSError:
        pass
    return None


def _parse_environment(text: str) -> dict[str, str]:
    """``/etc/environment`` as ``pam_env`` reads it: ``[export ]NAME=VALUE`` lines, one pair of
    matching quotes around the value stripped, anything else skipped."""
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        name, sep, value = line.partition("=")
        if not sep or not _ENV_NAME.match(name):
            continue
        if len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]:
            value = value[1:-1]
        env[name] = value
    return env


def login_env(root: int) -> tuple[dict[str, str], str, str]:
    """Environment, shell and home of an ``ssh`` login to the host whose PID 1 is ``root``:
    what ``sshd`` sets, then ``pam_env``'s ``/etc/environment`` of that host."""
    user = pwd.getpwuid(os.getuid())
    shell = user.pw_shell or "/bin/sh"
    home = user.pw_dir
    env = {"USER": user.pw_name, "LOGNAME": user.pw_name, "HOME": home, "SHELL": shell,
           "PATH": SSHD_PATH}
    try:
        with open(f"/proc/{root}/root/etc/environment", errors="replace") as f:
            env.update(_parse_environment(f.read()))
    except OSError:
        pass
    home = env.get("HOME", home)
    if not os.path.isdir(f"/proc/{root}/root{home}"):
        home = "/"
    return env, shell, home


def _reply(conn: socket.socket, **fields: Any) -> None:
    conn.sendall((json.dumps(fields) + "\n").encode())


def _run_in_host(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    name = str(req.get("host", "")).rsplit("@", 1)[-1]
    host = name if name in _hosts else _addresses.get(name)
    if host is None or not _alive(host) or len(fds) != 3:
        _reply(conn, code=255, error=f"ssh: connect to host {name} port 22: "
               + ("Could not resolve hostname" if host is None else "Connection refused"))
        return
    env, shell, home = login_env(_hosts[host])
    env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    command = str(req.get("command", ""))
    argv = [shell, "-c", command] if command else [shell, "-l"]
    proc = subprocess.Popen(["nsenter", "-t", str(_hosts[host]), "-n", "-u", "-m", "-p", "-i",
                             f"--wd={home}", "--", *argv], env=env, stdin=fds[0], stdout=fds[1],
                            stderr=fds[2], start_new_session=True)
    for fd in fds:
        os.close(fd)
    fds.clear()

    def hang_up() -> None:  # the caller went away: end the command, as sshd would
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    threading.Thread(target=hang_up, daemon=True).start()
    code = proc.wait()
    _reply(conn, code=code if code >= 0 else 128 - code)


def _serve_one(conn: socket.socket) -> None:
    fds: list[int] = []
    try:
        data = b""
        while not data.endswith(b"\n"):
            chunk, got, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
            fds.extend(got)
            if not chunk:
                return
            data += chunk
        req = json.loads(data)
        op = req.get("op")
        if op == "run":
            _run_in_host(conn, req, fds)
        elif op == "listen":
            pid = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            host = _host_of_pid(int.from_bytes(pid[:4], sys.byteorder))
            if host is not None:
                _listening.add(host)
            _reply(conn, ok=host is not None, host=host)
        elif op == "ready":
            host = str(req.get("host", ""))
            host = host if host in _hosts else _addresses.get(host, host)
            _reply(conn, ok=host in _listening and _alive(host))
        else:
            _reply(conn, error=f"unknown op {op!r}")
    except (OSError, ValueError) as exc:
        try:
            _reply(conn, code=255, error=f"{type(exc).__name__}: {exc}")
        except OSError:
            pass
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def serve(path: str) -> None:
    """Serve the no-sshd socket at ``path`` (see the module docstring) on a daemon thread."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def _own_proc() -> bool:
    """True when /proc shows this PID namespace (``unshare --mount-proc``): ``nsenter -t PID``
    must never resolve a PID of this namespace against the machine's /proc."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[1]) == os.getpid() == 1
    return False


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _own_proc():
        emit("fatal", message="the agent must be PID 1 of its own PID namespace with its own /proc")
        return
    if os.readlink("/proc/self/ns/net") == os.readlink("/proc/1/ns/net") and os.getpid() != 1:
        emit("fatal", message="the agent is not in a private network namespace")
        return
    try:
        setup_bridge()
    except subprocess.CalledProcessError as exc:
        emit("fatal", message=exc.stderr.decode(errors="replace").strip())
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
    emit("ready", pid=os.getpid())
    for line in sys.stdin:
        try:
            if not handle(json.loads(line)):
                break
        except Exception as exc:  # report, keep serving
            emit("error", message=f"{type(exc).__name__}: {exc}")
    for pid in _hosts.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    main()
