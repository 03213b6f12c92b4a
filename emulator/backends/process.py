"""Process backend: each emulated host is a set of Linux namespaces on this machine.

Per job, ``unshare`` makes a user (when not root), network and PID namespace whose PID 1 is
:mod:`.nsagent`; it holds a bridge. Per host, ``bwrap`` adds network, UTS, mount and PID
namespaces: hostname ``algo-N``; ``eth0`` (one end of a veth pair on the job's bridge) with its
own address; ``/opt/ml`` bind-mounted at its real path; private ``/etc/hosts``,
``/etc/environment`` and ``/tmp``; ``~/.aws`` hidden; a fresh ``/proc``. The host's command is
PID 1 of its PID namespace, as a container's entrypoint is: SIGTERM from outside reaches it only
if it handles SIGTERM (as ``docker stop`` on SageMaker), and killing it kills every process the
host started, including those in new sessions.

MPI-family jobs: ``sshd`` in every host (:mod:`.sshd`): OpenSSH's as root; not root, a stand-in
speaking real SSH, mounted over ``/usr/sbin/sshd`` (an unprivileged user namespace cannot run
OpenSSH's).

Not emulated: the user's Python, filesystem (outside ``/opt/ml``, ``/tmp`` and ``/etc/hosts``)
and kernel are shared with this machine; CPU and memory limits of the instance type are not
applied; ``SM_NUM_CPUS`` is this machine's CPU count.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable, EmulatorError
from . import sshd
from .base import HostSpec, JobSpec, Mount

#: How long the agent may take to set up the job network and to start one host.
AGENT_START_TIMEOUT = 20.0
HOST_START_TIMEOUT = 30.0
TOOLS = ("unshare", "nsenter", "ip", "bwrap")


def _ns_pids(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except OSError:
        pass
    return []


class ProcessHost:
    """Handle of one host (its PID 1 lives in the agent's PID namespace)."""

    def __init__(self, job: ProcessJob, spec: HostSpec, index: int) -> None:
        self.name = spec.name
        self.spec = spec
        self.index = index
        self._job = job
        self.ns_pid: int | None = None  # PID 1 of the host, as the agent sees it
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self._job.pump()
        return self.returncode

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.returncode is not None:
            return
        if sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL):
            for pid in self.pids():  # every process, not only PID 1
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        else:
            self._job.send({"op": "signal", "host": self.name, "sig": int(sig)})

    def pids(self) -> list[int]:
        """Machine-level PIDs of every process in this host."""
        root = self._root_pid()
        if root is None:
            return []
        try:
            target = os.readlink(f"/proc/{root}/ns/pid")
        except OSError:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == target:
                        out.append(int(entry))
                except OSError:
                    continue
        return sorted(out)

    def _root_pid(self) -> int | None:
        if self.ns_pid is None or self._job.agent_pid is None:
            return None
        agent_ns = os.readlink(f"/proc/{self._job.agent_pid}/ns/pid") if os.path.exists(
            f"/proc/{self._job.agent_pid}") else None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            nspids = _ns_pids(int(entry))
            if len(nspids) >= 3 and nspids[1] == self.ns_pid and nspids[2] == 1:
                try:
                    parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    if agent_ns is None or os.readlink(f"/proc/{parent}/ns/pid") == agent_ns:
                        return int(entry)
                except (OSError, ValueError, IndexError):
                    continue
        return None


class ProcessJob:
    """A running job on the process backend (its agent and hosts)."""

    def __init__(self, spec: JobSpec, proc: subprocess.Popen[str]) -> None:
        self.spec = spec
        self.proc = proc
        self.agent_pid: int | None = None
        self.hosts: dict[str, ProcessHost] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._closed = False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._events.put(json.loads(line))
            except ValueError:
                continue
        self._events.put({"event": "agent-exit"})

    def send(self, cmd: Mapping[str, Any]) -> None:
        if self._closed or self.proc.poll() is not None:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def _apply(self, event: dict[str, Any]) -> dict[str, Any]:
        kind = event.get("event")
        host = self.hosts.get(event.get("host", ""))
        if kind == "started" and host is not None:
            host.ns_pid = int(event["pid"])
        elif kind == "exited" and host is not None:
            code = int(event["code"])
            # bwrap reports a host killed by signal N as 128+N (as docker does): return -N, as
            # subprocess and the docker backend do.
            host.returncode = -(code - 128) if 128 < code < 128 + 65 else code
            if event.get("error"):
                with open(host.spec.log_path, "a") as log:
                    log.write(f"[emulator] {host.name} could not start: {event['error']}\n")
        elif kind == "agent-exit":
            for h in self.hosts.values():
                if h.returncode is None:
                    h.returncode = -signal.SIGKILL
        return event

    def pump(self) -> None:
        while True:
            try:
                self._apply(self._events.get_nowait())
            except queue.Empty:
                return

    def wait_event(self, kinds: set[str], timeout: float, host: str | None = None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmulatorError(f"timed out after {timeout:.0f} s waiting for the namespace agent "
                                    f"({'/'.join(sorted(kinds))}{' of ' + host if host else ''})")
            try:
                event = self._apply(self._events.get(timeout=remaining))
            except queue.Empty:
                continue
            if event.get("event") in ("fatal", "agent-exit"):
                raise EmulatorError(f"namespace agent failed: {event.get('message', 'exited')}")
            if event.get("event") == "error":
                raise EmulatorError(f"namespace agent: {event.get('message')}")
            if event.get("event") in kinds and (host is None or event.get("host") == host):
                return event

    def disconnect(self, host: str) -> None:
        self.send({"op": "disconnect", "host": host, "index": self.hosts[host].index})

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        h = self.hosts[host]
        root = h._root_pid()
        if root is None:
            raise EmulatorError(f"{host} is not running")
        return ["nsenter", "-t", str(root), "--all", "--preserve-credentials", *argv] if os.geteuid() else \
            ["nsenter", "-t", str(root), "-n", "-u", "-m", "-p", "-i", *argv]

    def teardown(self, grace: float) -> None:
        if self._closed:
            return
        self.pump()
        for h in self.hosts.values():
            h.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(h.poll() is None for h in self.hosts.values()):
            time.sleep(0.05)
        self.send({"op": "exit"})
        self._closed = True
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.pump()
        _LIVE.discard(self)


_LIVE: set[ProcessJob] = set()


def _backstop() -> None:
    for job in list(_LIVE):
        job.teardown(0)


class ProcessBackend:
    """Linux-namespace hosts; see the module docstring."""

    name = "process"
    inhost_root = str(Path(__file__).resolve().parent.parent / "inhost")

    def check(self) -> None:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            raise BackendUnavailable(
                f"the process backend needs {', '.join(missing)} (Debian: util-linux, iproute2, "
                "bubblewrap); install them or use --backend docker")
        if sys.platform != "linux":
            raise BackendUnavailable("the process backend needs Linux namespaces; use --backend docker")
        probe = subprocess.run([*self._unshare_prefix(), "true"], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            raise BackendUnavailable(
                "this machine does not allow the namespaces the process backend needs "
                f"({probe.stderr.strip() or 'unshare failed'}); user namespaces may be disabled "
                "(sysctl user.max_user_namespaces / kernel.unprivileged_userns_clone). "
                "Use --backend docker instead.")

    def base_env(self) -> dict[str, str]:
        return dict(os.environ)

    def train_command(self) -> list[str]:
        return ["train"]  # replaced by the supervisor with [python, train script]

    def inhost_mounts(self) -> list[Mount]:
        return []

    @staticmethod
    def _unshare_prefix() -> list[str]:
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        return ["unshare", *user, "--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc"]

    def start(self, job: JobSpec) -> ProcessJob:
        proc = subprocess.Popen(
            [*self._unshare_prefix(), sys.executable, "-S", "-E", "-s", str(Path(__file__).with_name("nsagent.py"))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1,
            start_new_session=True)
        running = ProcessJob(job, proc)
        _LIVE.add(running)
        try:
            ready = running.wait_event({"ready"}, AGENT_START_TIMEOUT)
            running.agent_pid = self._agent_root_pid(proc.pid, int(ready["pid"]))
            prefix = job.subnet.split("/")[1]
            for index, spec in enumerate(job.hosts, start=1):
                running.hosts[spec.name] = ProcessHost(running, spec, index)
                running.send({"op": "start", "host": spec.name, "index": index,
                              "cidr": f"{spec.address}/{prefix}",
                              "argv": self.bwrap_argv(spec, job),
                              "env": dict(spec.env), "log": str(spec.log_path)})
                running.wait_event({"started", "exited"}, HOST_START_TIMEOUT, host=spec.name)
        except BaseException:
            running.teardown(0)
            raise
        return running

    @staticmethod
    def _agent_root_pid(unshare_pid: int, ns_pid: int) -> int | None:
        try:
            children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
            return int(children[0]) if children else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def bwrap_argv(spec: HostSpec, job: JobSpec) -> list[str]:
        """The ``bwrap`` command line that makes ``spec`` a host (see the module docstring)."""
        etc = job.scratch / spec.name
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(spec.hosts_file)
        (etc / "hostname").write_text(spec.name + "\n")
        env_file = etc / "environment"
        if Path("/etc/environment").is_file():
            shutil.copyfile("/etc/environment", env_file)
        else:
            env_file.write_text("")
        # The network namespace comes from unshare, not bwrap: bwrap's own loopback set-up
        # (RTM_NEWADDR) fails now and then when many hosts start at once; the agent sets lo up.
        argv = ["unshare", "--net", "--", "bwrap", "--dev-bind", "/", "/", "--unshare-uts", "--unshare-pid",
                "--unshare-ipc", "--hostname", spec.name, "--die-with-parent", "--as-pid-1",
                "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
                "--bind", str(etc / "hosts"), "/etc/hosts", "--bind", str(etc / "hostname"), "/etc/hostname",
                "--info-fd", "{INFO_FD}", "--block-fd", "{BLOCK_FD}"]
        for keep in _tmp_passthrough(spec):
            argv += ["--dev-bind", keep, keep]
        if Path("/etc/environment").is_file():
            argv += ["--bind", str(env_file), "/etc/environment"]
        if not Path("/opt/ml").is_dir():
            argv += ["--tmpfs", "/opt"]
            for entry in sorted(Path("/opt").iterdir()) if Path("/opt").is_dir() else []:
                if entry.is_symlink():
                    argv += ["--symlink", os.readlink(entry), str(entry)]
                else:
                    argv += ["--dev-bind", str(entry), str(entry)]
        argv += ["--bind", str(spec.opt_ml), "/opt/ml"]
        for m in spec.mounts:
            argv += ["--ro-bind" if m.read_only else "--bind", str(m.source), m.target]
        aws = Path.home() / ".aws"
        if aws.exists() and spec.env.get("AWS_SHARED_CREDENTIALS_FILE") == "/dev/null":
            argv += ["--tmpfs", str(aws)]
        # sshd per host for the MPI family: OpenSSH's as root, else the stand-in (emulator/backends/sshd.py).
        argv += sshd.bwrap_args(job.scratch, python=spec.command[0], env_home=spec.env.get("HOME"))
        argv += ["--chdir", spec.workdir, "--", *spec.command]
        return argv


def _tmp_passthrough(spec: HostSpec) -> list[str]:
    """Top-level ``/tmp/*`` folders the host needs although its ``/tmp`` is private: the
    interpreter, its packages, and what ``PATH``/``PYTHONPATH`` name (e.g. a venv or a clone
    that lives under ``/tmp``)."""
    tmp = os.path.realpath("/tmp")
    candidates = [*sys.path, sys.prefix, sys.base_prefix, spec.command[0] if spec.command else "",
                  *spec.env.get("PATH", "").split(":"), *spec.env.get("PYTHONPATH", "").split(":")]
    keep: set[str] = set()
    for path in candidates:
        if not path or not os.path.isabs(path):
            continue
        real = os.path.realpath(path)
        if real.startswith(tmp + "/"):
            top = os.path.join(tmp, real[len(tmp) + 1:].split("/")[0])
            if os.path.exists(top):
                keep.add(top)
    return sorted(keep)


import atexit  # noqa: E402

atexit.register(_backstop)
