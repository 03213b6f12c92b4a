"""The job's namespace agent: PID 1 of one job's user+net+pid namespaces (process backend).

Started by :mod:`emulator.backends.process.backend` through ``unshare``; it owns the job's bridge and
starts each host with ``bwrap`` (own net, UTS, mount and PID namespaces), wiring a veth pair so
the host sees ``eth0`` with its own address. It speaks JSON lines: commands on stdin, events on
stdout. When stdin closes (the emulator exited or was killed) it exits, and because it is PID 1
of the job's PID namespace the kernel kills every process of every host with it: nothing of a
job can outlive its emulator.

The one exception is deliberate: the ``keep`` op (``--keep-hosts``, see :mod:`emulator.kept.records`).
After it the agent answers ``kept``, sends its events and errors to the file the op names instead
of the emulator's pipe, and no longer exits at end of input: it stays until every host has exited
or it is killed (``python -m emulator reap`` SIGKILLs it, which kills every host with it). A job
whose agent never got ``keep`` keeps the guarantee above.

Runs with only the standard library and ``ip``/``nsenter``/``bwrap``; imports nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

BRIDGE = "br0"
_lock = threading.Lock()
_hosts: dict[str, int] = {}  # host → pid (in this namespace) of its PID 1
_exited: set[str] = set()
_all_exited = threading.Event()  # set when every started host has exited
_kept: list[str] = []  # the events file, once the ``keep`` op arrived


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
    os.write(block_w, b"1")
    os.close(block_w)
    emit("started", host=host, pid=child)

    def wait() -> None:
        code = proc.wait()
        _exited.add(host)
        emit("exited", host=host, code=code)
        if _exited >= set(_hosts):
            _all_exited.set()

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
        ip("link", "set", f"veth{cmd['index']}", "down")
        ip("link", "set", f"veth{cmd['index']}", "nomaster")
    elif op == "keep":
        keep(cmd["log"])
    elif op == "exit":  # an explicit teardown ends a kept job too
        _kept.clear()
        return False
    return True


def keep(log: str) -> None:
    """Outlive the emulator: answer ``kept``, then write events and errors to ``log`` (the
    emulator's pipe goes away with it) and ignore end of input (see the module docstring)."""
    emit("kept", pid=os.getpid())
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with _lock:
        sys.stdout.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    os.close(fd)
    _kept.append(log)


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
    emit("ready", pid=os.getpid())
    for line in sys.stdin:
        try:
            if not handle(json.loads(line)):
                break
        except Exception as exc:  # report, keep serving
            emit("error", message=f"{type(exc).__name__}: {exc}")
    if _kept and _hosts:
        _all_exited.wait()
    for pid in _hosts.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    main()
