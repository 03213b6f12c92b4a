"""Process backend: each emulated host is a set of Linux namespaces on this machine.

Per job, ``unshare`` makes a user (when not root), network and PID namespace whose PID 1 is
:mod:`.nsagent`; it holds a bridge. Per host, ``unshare --net`` + ``bwrap`` add network, UTS,
mount and PID namespaces: hostname ``algo-N``; ``eth0`` (one end of a veth pair on the job's
bridge) with its own address; ``/opt/ml`` bind-mounted at its real path; private ``/etc/hosts``,
``/etc/environment`` and ``/tmp``; a fresh ``/proc``. A container's filesystem, not this machine's:
the system folders (:data:`SYSTEM_FOLDERS`, ``/opt``) read-only, ``HOME=/root`` an empty tmpfs of
its own, and of the rest of this machine (``/home``, ``/root``, project folders) only what the host
runs (:func:`needed_paths`: the job's interpreter and packages, read-only; its job environment,
writable; the in-host code), so none of the caller's files (``~/.netrc``, ``~/.aws``, tokens). The host's command is
PID 1 of its PID namespace, as a container's entrypoint is: SIGTERM from outside reaches it only
if it handles SIGTERM (as ``docker stop`` on SageMaker), and killing it kills every process the
host started, including those in new sessions.

The "image" is this machine: the job's interpreter (yours, or a venv layered on it for
``requirements.txt``) with its scripts on ``PATH``, the system's tools, and an environment built
from an allowlist (see :mod:`emulator.job.plan`): ``PATH``, ``HOME=/root``, ``LD_LIBRARY_PATH`` (when
set; your interpreter may need it) and ``HOSTNAME=algo-N`` (as docker sets it).

``sshd`` in every host (:mod:`.sshd`), for the MPI family's ``mpirun`` over ssh: OpenSSH's as
root; not root, a stand-in speaking real SSH, mounted over ``/usr/sbin/sshd`` (an unprivileged
user namespace cannot run OpenSSH's).

Not emulated: the user's Python and this machine's system folders (read-only, where a
container's are writable) and kernel are shared with this machine; CPU and memory limits of the instance type are not
applied; ``SM_NUM_CPUS`` is this machine's CPU count.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import platform
import pwd
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...console import RAW_SUFFIX
from ...errors import BackendUnavailable, EmulatorError, RequestError
from ...inhost import ROOT as INHOST_ROOT
from ...inhost import protocol as P
from ..base import HostLaunch, KeptHosts, LaunchSpec, Mount, Runtime, World, diag_folder, host_addresses, hosts_file
from . import sshd
from .namespaces import AGENT_OWNER_FLAG, AGENT_SCRATCH_FLAG, namespace_pids, nsenter_argv

if TYPE_CHECKING:
    from ...job.plan import JobPlan
    from ...job.request import JobRequest

#: How long the agent may take to set up the job network and to start one host.
AGENT_START_TIMEOUT = 20.0
HOST_START_TIMEOUT = 30.0
TOOLS = ("unshare", "nsenter", "ip", "bwrap")
#: The ``PATH`` of the "image" after the interpreter's scripts (Debian's default, as in a DLC).
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Variables of this machine that the "image" keeps, because the interpreter may need them.
IMAGE_VARIABLES = ("LD_LIBRARY_PATH",)
#: ``AlgorithmSpecification.TrainingImage`` of a job that names no image (no image runs).
TRAINING_IMAGE = "emulator:process"


def train_script() -> Path:
    """The ``train`` console script of the sagemaker-training toolkit installed here."""
    import sysconfig

    return Path(sysconfig.get_path("scripts")) / "train"


class ProcessHost:
    """Handle of one host (its PID 1 lives in the agent's PID namespace)."""

    def __init__(self, job: ProcessJob, launch: HostLaunch, index: int) -> None:
        self.name = launch.name
        self.launch = launch
        self.index = index
        self._job = job
        self.ns_pid: int | None = None  # PID 1 of the host, as the agent sees it
        self.status: int | None = None  # exit status of PID 1 (128+N: killed by signal N)
        self.sent: set[int] = set()  # fatal signals the emulator delivered

    def poll(self) -> P.HostExit | None:
        self._job.pump()
        return None if self.status is None else P.exit_of(self.status, self.sent)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.status is not None or self._job._kept:  # kept: handed off, stays frozen
            return
        if sig not in (signal.SIGSTOP, signal.SIGCONT):
            self.sent.add(int(sig))
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
        root = self.root_pid()
        return [] if root is None else namespace_pids(root)

    def root_pid(self) -> int | None:
        """The machine-level PID of the host's PID 1."""
        if self.ns_pid is None or self._job.agent_pid is None:
            return None
        try:
            agent_ns = os.readlink(f"/proc/{self._job.agent_pid}/ns/pid")
        except OSError:
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            nspids = P.proc_nspids(int(entry))
            if len(nspids) >= 3 and nspids[1] == self.ns_pid and nspids[2] == 1:
                stat = P.proc_stat(int(entry))
                try:
                    if stat is not None and os.readlink(f"/proc/{stat.ppid}/ns/pid") == agent_ns:
                        return int(entry)
                except OSError:
                    continue
        return None


class ProcessJob:
    """A running job on the process backend (its agent and hosts)."""

    def __init__(self, spec: LaunchSpec, proc: subprocess.Popen[str]) -> None:
        self.spec = spec
        self.proc = proc
        self.agent_pid: int | None = None
        self.hosts: dict[str, ProcessHost] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._closed = False
        self._kept = False

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
            host.status = int(event["code"])  # bwrap reports a PID 1 killed by signal N as 128+N
            if event.get("error"):
                with open(host.launch.log_path, "a") as log:
                    log.write(f"[emulator] {host.name} could not start: {event['error']}\n")
        elif kind == "agent-exit":
            for h in self.hosts.values():
                if h.status is None:
                    h.sent.add(signal.SIGKILL)
                    h.status = P.status_of_signal(signal.SIGKILL)
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
        root = self.hosts[host].root_pid()
        if root is None:
            raise EmulatorError(f"{host} is not running")
        return nsenter_argv(root, argv)

    def keep(self) -> dict[str, Any]:
        """Freeze the hosts that still run (SIGSTOP to every process) and hand the agent off: it
        stays after this process exits (see :mod:`.nsagent`). Returns the agent's and each kept
        host's machine-level PID and start time (what ``emulator.kept.records`` finds them by)."""
        self.pump()
        kept: dict[str, Any] = {}
        for name, h in self.hosts.items():
            root = h.root_pid() if h.poll() is None else None
            if root is not None:
                _wait_set_up(root, HOST_START_TIMEOUT)
            stat = P.proc_stat(root) if root is not None else None
            if stat is not None:
                h.signal(signal.SIGSTOP)
                kept[name] = {"pid": root, "start_time": stat.start_time}
        agent = P.proc_stat(self.agent_pid) if self.agent_pid is not None else None
        if not kept or agent is None or self._closed:
            return {"hosts": {}}
        self.send({"op": "keep", "log": str(self.spec.scratch / "kept-agent.log")})
        self.wait_event({"kept"}, AGENT_START_TIMEOUT)
        self._kept = True
        return {"hosts": kept, "agent": {"pid": agent.pid, "start_time": agent.start_time},
                "user_namespace": os.geteuid() != 0}

    def teardown(self, grace: float) -> None:
        if self._closed:
            return
        if not self._kept:  # (a kept job's agent is released below and outlives us: see keep)
            self.pump()
            for h in self.hosts.values():
                h.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(h.poll() is None for h in self.hosts.values()):
                time.sleep(0.05)
            for h in self.hosts.values():
                if h.poll() is None:
                    h.sent.add(signal.SIGKILL)  # the agent's exit kills every host
            self.send({"op": "exit"})
        self._closed = True
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        if not self._kept:
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


atexit.register(_backstop)


class ProcessBackend:
    """Linux-namespace hosts; see the module docstring."""

    name = "process"
    fast_start = True  # ranks may fork from a pre-imported interpreter (emulator/job/profiles.py)
    shares_machine_filesystem = True  # outside the spec's mounts and /tmp, a host sees this machine's files

    def check(self, *, request: JobRequest | None = None) -> None:
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

    def runtime(self, *, python: str | None = None, request: JobRequest | None = None) -> Runtime:
        """This machine as the image: ``python`` (default: this interpreter) runs the toolkit's
        ``train`` script (a job environment's own, from its DLC's toolkit); its scripts (``torchrun``,
        ``pip``, the layers' console scripts) come first on ``PATH``."""
        python = python or sys.executable
        # a job environment has the DLC's toolkit's own `train` (its layers' console scripts); this
        # interpreter (no job yet) the one installed here
        train = Path(python).parent / "train" if Path(python) != Path(sys.executable) else train_script()
        scripts = list(dict.fromkeys([str(Path(python).parent), str(train.parent)]))
        base = {"HOME": CONTAINER_HOME}
        base.update({k: os.environ[k] for k in IMAGE_VARIABLES if os.environ.get(k)})
        spec = importlib.util.find_spec("gethostname")  # the toolkit's LD_PRELOAD library
        gethostname_so = spec.origin if spec is not None else None
        toolkit = _toolkit()
        if request is not None:
            from .. import jobenv, layers

            # the job's toolkit is the DLC image's, in its framework layer (same Python: same file name)
            toolkit = _layer_toolkit(request)
            image_layer = layers.image_layer(jobenv.install_of(request)).path
            gethostname_so = str(image_layer / Path(gethostname_so).name) if gethostname_so else None
        return Runtime(python=python, train_command=(python, str(train)), inhost_root=str(INHOST_ROOT),
                       base_env=base, path=":".join([*scripts, SYSTEM_PATH]),
                       gethostname_so=gethostname_so, toolkit=toolkit[0], training_image=TRAINING_IMAGE)

    # -- framework_version: this machine's interpreter with the DLC's torch (emulator/job/frameworks.py)
    def job_python(self, request: JobRequest) -> str | None:
        from .. import jobenv

        _refuse(request)
        return jobenv.interpreter(request.source_dir, request.requirements_file, jobenv.install_of(request))

    def prepare(self, request: JobRequest, *, say: Callable[[str], None]) -> list[str]:
        """Refuse a framework whose torch has no wheel for this interpreter; say when the DLC
        image's framework layers are installed first (``prepare_python`` makes them)."""
        from .. import jobenv, layers

        self.job_python(request)
        install = jobenv.install_of(request)
        for layer in layers.layers(install):
            if not layer.ready:
                say(f"installing {layer.what} into a framework layer (once per machine; GBs for torch; "
                    "pip's output: logs/jobenv.log)")
        return []

    def job_world(self, request: JobRequest) -> World | None:
        """The framework layers' modules and what the job environment's requirements added (once made)."""
        from .. import jobenv, layers

        install = jobenv.install_of(request)
        made = layers.layers(install)
        python = self.job_python(request)
        extra = jobenv.requirement_modules(python) if python else None
        if not all(layer.ready for layer in made) or extra is None:
            return None
        return World(frozenset().union(*(layer.modules() for layer in made)), extra)

    def prepare_python(self, request: JobRequest, *, scratch: Path, log: Path, env: Mapping[str, str]) -> str | None:
        """The job environment, made on this machine as the caller: pip runs with the hosts'
        environment but the caller's own ``HOME`` (its pip configuration and cache), not the hosts'."""
        from .. import jobenv

        if env.get("HOME") == CONTAINER_HOME:
            env = {**env, "HOME": pwd.getpwuid(os.geteuid()).pw_dir}
        return jobenv.prepare(request.source_dir, scratch, log, jobenv.install_of(request),
                              requirements=request.requirements_file, env=env)[0]

    @staticmethod
    def framework(plan: JobPlan) -> dict[str, Any]:
        """``Emulator.Framework``: this interpreter's Python and toolkits, and the torch the job
        environment holds (the framework's, once the environment is made)."""
        from ...job import frameworks
        from .. import jobenv, layers

        selection = plan.request.framework
        python = plan.runtime.python
        torch = jobenv.torch_version(python) if jobenv.is_ready(python) else \
            selection.family.torch if selection is not None and selection.family is not None else None
        return frameworks.record(selection, torch=torch, python=platform.python_version(),
                                 toolkit=_layer_toolkit(plan.request), python_from="this machine's interpreter",
                                 image=plan.request.dlc_image,
                                 torch_build=layers.torch_build(jobenv.install_of(plan.request)))

    def launch_spec(self, plan: JobPlan, *, job_id: str, scratch: Path, logs: Path) -> LaunchSpec:
        from ..materialise import host_mounts

        addresses = host_addresses(P.JOB_SUBNET, [h.name for h in plan.hosts])
        etc_hosts = hosts_file(addresses)
        diag = Mount(diag_folder(scratch), P.DIAG_DIR)
        launches = []
        for host in plan.hosts:
            env = {**host.env, "HOSTNAME": host.name, "PWD": P.CODE_DIR}  # bwrap --chdir sets PWD
            mounts = (*host_mounts(plan, host.name), diag)
            partial = HostLaunch(name=host.name, address=addresses[host.name], command=tuple(host.command),
                                 env=env, workdir=P.CODE_DIR, mounts=mounts, hosts_file=etc_hosts,
                                 log_path=logs / f"{host.name}{RAW_SUFFIX}", argv=())
            argv = bwrap_argv(partial, scratch, python=plan.runtime.python)
            launches.append(HostLaunch(**{**partial.__dict__, "argv": tuple(argv)}))
        return LaunchSpec(backend=self.name, job_id=job_id, subnet=P.JOB_SUBNET, hosts=tuple(launches),
                          scratch=scratch, options={"python": plan.runtime.python, "user_namespace": os.geteuid() != 0,
                                                    "sshd": "openssh" if sshd.available() else
                                                    "stand-in" if sshd.standin_used() else None,
                                                    "framework": self.framework(plan),
                                                    # the agent's command line names its job and emulator
                                                    "agent": {AGENT_SCRATCH_FLAG: str(scratch),
                                                              AGENT_OWNER_FLAG: _owner()},
                                                    **({"ssh": {"made_at_start_in": str(scratch / sshd.SUBDIR)}}
                                                       if sshd.available() or sshd.standin_used() else {}),
                                                    **_pending(plan.request, plan.runtime.python)})

    @staticmethod
    def _unshare_prefix() -> list[str]:
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        return ["unshare", *user, "--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc"]

    def start(self, spec: LaunchSpec) -> ProcessJob:
        if spec.options.get("sshd"):
            sshd.prepare(spec.scratch, python=spec.options["python"])
        for host in spec.hosts:
            _write_etc(spec.scratch / host.name, host)
            for m in host.mounts:
                if not m.read_only:
                    m.source.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [*self._unshare_prefix(), sys.executable, "-S", "-E", "-s", str(Path(__file__).with_name("nsagent.py")),
             *(a for flag_value in spec.options["agent"].items() for a in flag_value)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1,
            start_new_session=True)
        running = ProcessJob(spec, proc)
        _LIVE.add(running)
        try:
            running.wait_event({"ready"}, AGENT_START_TIMEOUT)
            running.agent_pid = self._agent_root_pid(proc.pid)
            prefix = spec.subnet.split("/")[1]
            for index, host in enumerate(spec.hosts, start=1):
                running.hosts[host.name] = ProcessHost(running, host, index)
                running.send({"op": "start", "host": host.name, "index": index,
                              "cidr": f"{host.address}/{prefix}", "argv": list(host.argv),
                              "env": dict(host.env), "log": str(host.log_path)})
                running.wait_event({"started", "exited"}, HOST_START_TIMEOUT, host=host.name)
        except BaseException:
            running.teardown(0)
            raise
        return running

    # -- kept hosts and what killed runs left (emulator/kept/records.py, emulator/kept/reap.py) -------------------
    def attach(self, record: Mapping[str, Any]) -> KeptHosts:
        from .kept import ProcessKeptHosts

        return ProcessKeptHosts(record)

    def reap_leftovers(self, scratch: Path, *, job_name: str, owner_pid: int) -> list[str]:
        from .kept import reap_agents_below

        return reap_agents_below(scratch, job_name=job_name, owner_pid=owner_pid)

    def reap_orphans(self) -> list[str]:
        from .kept import reap_orphan_agents

        return reap_orphan_agents()

    @staticmethod
    def _agent_root_pid(unshare_pid: int) -> int | None:
        try:
            children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
            return int(children[0]) if children else None
        except (OSError, ValueError):
            return None


def _owner() -> str:
    """``PID:START`` of this process: on the agent's command line, so ``reap`` can tell a kept
    agent whose emulator is gone (see :mod:`emulator.kept.records`)."""
    stat = P.proc_stat(os.getpid())
    return f"{os.getpid()}:{stat.start_time if stat else 0}"


def _pending(request: JobRequest, python: str) -> dict[str, list[str]]:
    """``plan``'s notes for what ``prepare_python`` still makes: framework layers, the job environment."""
    from .. import jobenv, layers

    notes = [f"{layer.what} is installed into the framework layer {layer.path} before the job starts (once per "
             "machine)" for layer in reversed(layers.layers(jobenv.install_of(request))) if not layer.ready]
    if not jobenv.is_ready(python):
        notes.append(f"the job environment {Path(python).parent.parent} is made before the job starts (it sees "
                     "the framework layers; then the requirements)")
    return {"pending": notes} if notes else {}


def _toolkit() -> tuple[str | None, str | None]:
    """The sagemaker-training and sagemaker-pytorch-training releases installed here."""
    from importlib import metadata

    out: list[str | None] = []
    for name in ("sagemaker-training", "sagemaker-pytorch-training"):
        try:
            out.append(metadata.version(name))
        except metadata.PackageNotFoundError:
            out.append(None)
    return out[0], out[1]


def _layer_toolkit(request: JobRequest) -> tuple[str | None, str | None]:
    """The toolkits a job's framework layer installs (:func:`emulator.job.frameworks.toolkit_for`)."""
    from ...job import frameworks

    return frameworks.toolkit_for(request.framework, request.dlc_image)


def _refuse(request: JobRequest) -> None:
    """RequestError, before anything starts, for a framework whose torch has no wheel for this
    interpreter (torch 1.12 on Python 3.11), naming both versions and ``--backend docker``, or
    whose family has no smoke test (:data:`~emulator.job.frameworks.SMOKE_TESTED`)."""
    from ...job import frameworks

    selection = request.framework
    allow = os.environ.get(frameworks.UNTESTED_VAR) == "1"
    why = frameworks.process_refusal(selection, sys.version_info[:2], platform.python_version(),
                                     allow_untested=allow)
    if why is not None and selection is not None:
        here = sys.version_info[:2]
        runnable = [f.name for f in frameworks.FAMILIES
                    if f.runs_on(here) and (allow or f.name in frameworks.SMOKE_TESTED)]
        raise RequestError(frameworks.FIELD_VERSION if selection.source == frameworks.FIELD_VERSION
                           else frameworks.FIELD_IMAGE, why,
                           allowed=f"on the process backend with Python {here[0]}.{here[1]}: "
                                   f"{', '.join(runnable)}, {frameworks.CURRENT}; any with --backend docker")


def _write_etc(folder: Path, host: HostLaunch) -> None:
    """The host's private ``/etc/hosts``, ``/etc/hostname`` and ``/etc/environment`` files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts").write_text(host.hosts_file)
    (folder / "hostname").write_text(host.name + "\n")
    env_file = folder / "environment"
    if Path("/etc/environment").is_file():
        shutil.copyfile("/etc/environment", env_file)
    else:
        env_file.write_text("")


#: The host's ``HOME``: root's, as in a DLC (its Dockerfiles set no ``USER``, so processes run as
#: root, and docker sets ``HOME`` from the user: https://docs.docker.com/reference/cli/docker/container/run/).
CONTAINER_HOME = "/root"
#: Top-level folders of this machine a host sees read-only, as an image's system folders (or the
#: symlinks to them that merged-/usr systems have). Everything else at the top (``/home``,
#: ``/root``, ``/mnt``, ``/srv``, project folders such as ``/work``) is absent, except the paths
#: :func:`needed_paths` names. ``/dev``, ``/proc``, ``/tmp``, ``/run`` and ``/opt`` are made apart.
SYSTEM_FOLDERS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "var", "sys")
#: Under ``/var``: emptied (other users' mail and spools; the machine's temporary files).
VAR_HIDDEN = ("/var/tmp", "/var/mail", "/var/spool", "/var/lib/docker")


def _system_args() -> list[str]:
    """``bwrap`` arguments for this machine's system folders (see :data:`SYSTEM_FOLDERS`)."""
    argv: list[str] = []
    for name in SYSTEM_FOLDERS:
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--dev-bind", "/dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm",
             "--tmpfs", "/run"]
    for hidden in VAR_HIDDEN:
        if Path(hidden).is_dir() and not Path(hidden).is_symlink():
            argv += ["--tmpfs", hidden]
    run_lock = Path("/run/lock")  # Debian's /var/lock points there
    if run_lock.is_dir():
        argv += ["--dir", str(run_lock)]
    argv += ["--tmpfs", "/opt"]  # the image's /opt (without /opt/ml: the job's mounts make it)
    for entry in sorted(Path("/opt").iterdir()) if Path("/opt").is_dir() else []:
        if entry.name == "ml":
            continue
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), str(entry)]
        else:
            argv += ["--ro-bind", str(entry), str(entry)]
    # the host's own empty HOME (per host: each host has its own mount namespace)
    argv += ["--perms", "0700", "--tmpfs", CONTAINER_HOME]
    return argv


def _homes() -> list[str]:
    """Home folders of this machine's users, and ``/home``/``/root``: never visible as a whole."""
    homes = {"/root", "/home", os.path.expanduser("~")}
    try:
        homes.update(p.pw_dir for p in pwd.getpwall())
    except OSError:
        pass
    return sorted(os.path.realpath(h) for h in homes if h and h.startswith("/"))


def _site_lines(folder: str) -> list[str]:
    """Folders that the ``.pth`` files of ``folder`` add to ``sys.path``: their path lines and the
    folders their ``site.addsitedir('…')`` lines add (a job environment's framework layers)."""
    out = []
    for pth in sorted(Path(folder).glob("*.pth")) if os.path.isdir(folder) else []:
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line.startswith(("import ", "import\t")):
                out += re.findall(r"site\.addsitedir\('([^']+)'\)", line)
            elif line and not line.startswith("#"):
                out.append(line if os.path.isabs(line) else os.path.join(folder, line))
    return out


def needed_paths(host: HostLaunch, python: str | None = None) -> tuple[list[str], list[str]]:
    """What of this machine outside the system folders a host needs, as ``(read_only, writable)``:
    the interpreter of the job (``host.command[0]``, or the ``python3`` the host's ``PATH`` finds when
    the command is a container entrypoint such as SDK v3's ``/bin/bash -c …``) with its prefixes, site folders and what
    their ``.pth`` files add (the caller's site-packages a job environment is layered on), the
    in-host code and what ``PATH``, ``PYTHONPATH`` and ``LD_LIBRARY_PATH`` name. Writable: the job
    environment itself (a venv the toolkit's ``pip install -r requirements.txt`` installs into, as
    a DLC's site-packages is writable in its container). Never a home folder itself, ``/`` or a
    parent of a home folder (so neither ``/root`` nor ``/home/*`` as a whole, only the
    interpreter's folders inside one); paths under ``/tmp`` are passed by :func:`_tmp_passthrough`."""
    import site

    python = python or _interpreter(host)
    writable: list[str] = []
    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, str(INHOST_ROOT),
                  *site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
                  *(p for p in sys.path if p.startswith(sys.prefix) or p.startswith(sys.base_prefix))]
    for folder in list(candidates):
        candidates += _site_lines(folder)
    venv = Path(python).parent.parent
    if os.path.isabs(python) and (venv / "pyvenv.cfg").is_file() and venv != Path(sys.prefix):
        writable.append(str(venv))
        for line in (venv / "pyvenv.cfg").read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                candidates.append(str(Path(value.strip()).parent))
        for site_dir in venv.glob("lib/python*/site-packages"):
            candidates += _site_lines(str(site_dir))
    candidates += [os.path.realpath(python), *(c for c in host.command[1:2] if os.path.isabs(c))]
    for var in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH"):
        candidates += host.env.get(var, "").split(":")
    homes = _homes()
    system = tuple(f"/{n}/" for n in (*SYSTEM_FOLDERS, "dev", "proc", "opt"))
    tmp = os.path.realpath("/tmp")

    def keep(path: str) -> bool:
        return (os.path.isabs(path) and os.path.exists(path) and path != "/"
                and not any(h == path or h.startswith(path.rstrip("/") + "/") for h in homes)
                and not (path + "/").startswith(system) and not (path + "/").startswith(tmp + "/"))

    def reduce(paths: list[str]) -> list[str]:
        out: list[str] = []
        for path in sorted({os.path.normpath(p) for p in paths if p}):
            real = os.path.realpath(path)
            for p in dict.fromkeys([path, real]):
                if keep(p) and not any(p == o or p.startswith(o + "/") for o in out):
                    out.append(p)
        return out

    rw = reduce(writable)
    ro = [p for p in reduce(candidates) if not any(p == w or p.startswith(w + "/") for w in rw)]
    return ro, rw


def _wait_set_up(root: int, timeout: float) -> None:
    """Wait (at most ``timeout``) until the host whose PID 1 is ``root`` is set up. A host's PID 1 is
    bwrap while it makes the host's mounts and then execs the host's command (``--as-pid-1``); a host
    frozen before that exec keeps a half-made filesystem, which ``emulator shell`` cannot run a
    command in. Returns at once when ``/proc/<root>/exe`` cannot be read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(os.readlink(f"/proc/{root}/exe")).name != "bwrap":
                return
        except OSError:
            return
        time.sleep(0.02)


def bwrap_argv(host: HostLaunch, scratch: Path, *, python: str | None = None) -> list[str]:
    """The command line that makes ``host`` (see the module docstring), whose interpreter is
    ``python`` (the plan's; default: guessed from the command). Pure: the files it names under
    ``scratch`` (``<host>/hosts``, ``hostname``, ``environment``; the ssh material) are written by
    ``start``."""
    etc = scratch / host.name
    # The network namespace comes from unshare, not bwrap: bwrap's own loopback set-up
    # (RTM_NEWADDR) fails now and then when many hosts start at once; the agent sets lo up.
    argv = ["unshare", "--net", "--", "bwrap", *_system_args(), "--unshare-uts", "--unshare-pid",
            "--unshare-ipc", "--hostname", host.name, "--die-with-parent", "--as-pid-1",
            "--bind", str(etc / "hosts"), "/etc/hosts", "--bind", str(etc / "hostname"), "/etc/hostname",
            "--info-fd", "{INFO_FD}", "--block-fd", "{BLOCK_FD}"]
    read_only, writable = needed_paths(host, python)
    for path in read_only:
        argv += ["--ro-bind", path, path]
    for path in writable:
        argv += ["--bind", path, path]
    for keep in _tmp_passthrough(host, python):
        argv += ["--dev-bind", keep, keep]
    if Path("/etc/environment").is_file():
        argv += ["--bind", str(etc / "environment"), "/etc/environment"]
    for m in host.mounts:
        argv += ["--ro-bind" if m.read_only else "--bind", str(m.source), m.target]
    # sshd per host for the MPI family: OpenSSH's as root, else the stand-in (emulator/backends/process/sshd.py)
    argv += sshd.mount_args(scratch)
    argv += ["--chdir", host.workdir, "--", *host.command]
    return argv


def _interpreter(host: HostLaunch) -> str:
    """The interpreter ``host`` runs when the plan does not say (:func:`needed_paths`): its command's,
    or for a container entrypoint (SDK v3: ``/bin/bash -c …``) the ``python3`` its ``PATH`` finds."""
    python = host.command[0] if host.command else sys.executable
    if not Path(python).name.startswith("python"):
        python = shutil.which("python3", path=host.env.get("PATH", "")) or python
    return python


def _tmp_passthrough(host: HostLaunch, python: str | None = None) -> list[str]:
    """Top-level ``/tmp/*`` folders the host needs although its ``/tmp`` is private: the
    interpreter, its packages (a job environment's framework layers included), and what
    ``PATH``/``PYTHONPATH`` name (e.g. a venv, a clone or ``XDG_CACHE_HOME`` under ``/tmp``)."""
    tmp = os.path.realpath("/tmp")
    python = python or _interpreter(host)
    venv = Path(python).parent.parent
    layers = [line for site_dir in venv.glob("lib/python*/site-packages") for line in _site_lines(str(site_dir))]
    candidates = [*sys.path, sys.prefix, sys.base_prefix, python, *layers,
                  *host.env.get("PATH", "").split(":"), *host.env.get("PYTHONPATH", "").split(":")]
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
