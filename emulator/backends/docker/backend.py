"""Docker backend: each emulated host is a container on a private per-job network.

What is emulated, as on SageMaker: ``docker run IMAGE train`` per host with hostname ``algo-N``;
``/opt/ml`` bind-mounted at its real path; a per-job network on which ``algo-N`` resolve through
the engine's DNS (network alias), isolated (``internal``) unless the job allows egress; the
image's own ``ENTRYPOINT``/``ENV``; root in the container; sshd reachable between hosts with a
per-cluster root keypair, so the toolkit's ``mpirun``-over-ssh runner works unchanged.

The launch spec is exact: the job network's subnet is chosen when the spec is made (the first
/24 that no network of the engine uses among 64 from ``10.0.0.0/24`` on, starting at one the job's
name picks: ``plan`` and ``run`` agree unless another job holds that one at the start), every host gets a static address
in it, its ``/etc/hosts`` is the spec's file bind-mounted read-only (so every ``algo-*`` name keeps
resolving after a peer's container exits, as on SageMaker), and its environment is the image's
``ENV`` overlaid with the plan's (read from the engine, so ``plan`` shows the whole of it).

What is not: no GPUs, EFA or instance sizing (no CPU/memory limits); the container stops SIGTERM
-> grace -> SIGKILL like ``StopTrainingJob``, but ``HostHandle.signal`` reaches every process of
the container (as the process backend does), not only PID 1.

Files reach the containers by bind mounts only where a sentinel check proved the engine sees this
machine's folders; otherwise (docker-outside-of-docker, ``docker:dind``, colima) they are copied
through the engine's API: :mod:`emulator.backends.docker.files` (``options.files`` of the spec).

The docker SDK is imported lazily (``import emulator`` never imports ``docker``).
"""

from __future__ import annotations

import atexit
import hashlib
import io
import ipaddress
import os
import shutil
import signal as _signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...console import RAW_SUFFIX
from ...errors import BackendUnavailable
from ...inhost import protocol as P
from ...job.toolkit_model import TOOLKIT_VERSION
from ..base import HostLaunch, LaunchSpec, Mount, Runtime, SubnetTaken, World, host_addresses, hosts_file
from . import engine, files, reaper
from .names import (
    DEFAULT_IMAGE,
    LABEL_HOST,
    LABEL_JOB,
    container_name,
    job_labels,
    network_name,
    owner_labels,
)

if TYPE_CHECKING:
    from ...job.plan import JobPlan
    from ...job.request import JobRequest
    from ..base import KeptHosts
    from .images import JobImage

IMAGE_SESSION = "nox -s image"
#: The emulator image's ENTRYPOINT (docker/entrypoint.sh), and what bash adds to the environment
#: of the command it execs (and ``PWD``).
ENTRYPOINT = "/usr/local/bin/sm-emulator-entrypoint"
ENTRYPOINT_ENV = {"SHLVL": "0"}
INHOST_ROOT = P.DOCKER_INHOST_ROOT
#: PATH of the emulator image (docker/Dockerfile ENV).
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KEY_NAME = "id_rsa"  # the per-cluster root key, in job.scratch/ssh and /root/.ssh
HOST_KEY = "ssh_host_ed25519_key"  # the cluster's sshd host key, in /etc/ssh (one of sshd's default names)
SHM_SIZE = "1g"  # SageMaker hosts have a large /dev/shm; docker's default 64 MB breaks DataLoader
API_TIMEOUT = 120.0  # seconds for ordinary engine calls
STREAM_TIMEOUT = 10 * 24 * 3600.0  # log streams and waits: effectively never
KILL_WAIT = 10.0  # seconds to wait for a container after SIGKILL
POLL_INTERVAL = 0.1

def resolve_image(image: str | None) -> str:
    """The image :meth:`DockerBackend.check` looks for: the default image for none or a PyTorch DLC
    URI, else ``image`` as given. A job's image follows its DLC image:
    :func:`emulator.backends.docker.images.planned`."""
    from ...job.frameworks import is_dlc_image

    if not image or is_dlc_image(image):
        return DEFAULT_IMAGE
    return image




def engine_error(what: str, e: BaseException) -> BackendUnavailable:
    """A clear error for an engine call that failed before the job started (exit status 3)."""
    where = engine.endpoint()
    detail = getattr(e, "explanation", None) or str(e)
    return BackendUnavailable(
        f"the docker engine at {where} could not {what} ({e.__class__.__name__}: {detail}); check that the "
        f"engine runs and you may use it, that no stale job holds its resources (`python -m emulator reap "
        f"JOB_DIR`), or force copied files with {files.FILES_ENV}=copy if a bind mount is what failed")


def _make_keypair(folder: Path, name: str = KEY_NAME, kind: str = "rsa") -> tuple[bytes, bytes]:
    """A fresh keypair in ``folder``: (private, public line). ``rsa`` (3072 bits, ssh-keygen's
    default) for the cluster's root key (``id_rsa``, as in the DLC); ``ed25519`` for the sshd host
    key, which no script sees (ssh's known-hosts file is ``/dev/null``) and which takes about a
    hundredth of an RSA key's CPU to make (an RSA 3072 key: about 1 CPU-s)."""
    folder.mkdir(parents=True, exist_ok=True)
    key = folder / name
    for f in (key, key.with_suffix(".pub")):
        f.unlink(missing_ok=True)
    if shutil.which("ssh-keygen"):
        size = ["-b", "3072"] if kind == "rsa" else []
        subprocess.run(["ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C",
                        "sagemaker-emulator", "-f", str(key)], check=True,
                       stdin=subprocess.DEVNULL)
        return key.read_bytes(), key.with_suffix(".pub").read_bytes()
    try:
        from cryptography.hazmat.primitives import serialization as ser
        from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
    except ImportError as e:
        raise BackendUnavailable("the docker backend needs ssh-keygen (apt-get install "
                                 "openssh-client) to make the cluster's ssh key") from e
    k = (rsa.generate_private_key(public_exponent=65537, key_size=3072) if kind == "rsa"
         else ed25519.Ed25519PrivateKey.generate())
    priv = k.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption())
    pub = k.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)
    key.write_bytes(priv)
    key.chmod(0o600)
    return priv, pub + b" sagemaker-emulator\n"


def _ssh_archive(private: bytes, public: bytes, host_key: tuple[bytes, bytes]) -> bytes:
    """A tar of ``root/.ssh`` (owned by root, sshd StrictModes-proof) and the cluster's sshd host
    key in ``etc/ssh`` (so sshd starts whatever runs as the container's entrypoint), to extract at
    ``/``."""
    ssh_config = b"Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("root/.ssh")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o700, int(time.time())
        tar.addfile(d)
        for name, data, mode in (("authorized_keys", public, 0o600),
                                 (KEY_NAME, private, 0o600),
                                 (f"{KEY_NAME}.pub", public, 0o644),
                                 ("config", ssh_config, 0o600)):
            info = tarfile.TarInfo(f"root/.ssh/{name}")
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        for name, data, mode in ((HOST_KEY, host_key[0], 0o600),
                                 (f"{HOST_KEY}.pub", host_key[1], 0o644)):
            info = tarfile.TarInfo(f"etc/ssh/{name}")
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerHost:
    """A running host: one container. Methods never raise for a host that has exited."""

    def __init__(self, name: str, container: Any, log_path: Path, stream_client: Any) -> None:
        self.name = name
        self.container = container
        self.log_path = log_path
        self._status: int | None = None
        self.sent: set[int] = set()  # fatal signals the emulator delivered
        self._stream_client = stream_client
        self._threads: list[threading.Thread] = []
        self.kept = False  # handed off by DockerJob.keep

    @property
    def started(self) -> bool:
        return bool(self._threads)

    def _follow(self) -> None:
        """Start the log-copy and exit-wait threads (after the container started)."""
        for target in (self._copy_logs, self._wait):
            t = threading.Thread(target=target, name=f"docker-{self.name}-{target.__name__}",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _copy_logs(self) -> None:
        try:
            c = self._stream_client.containers.get(self.container.id)
            with open(self.log_path, "ab", buffering=0) as out:
                for chunk in c.logs(stream=True, follow=True, stdout=True, stderr=True):
                    out.write(chunk)
        except Exception:
            pass  # the container went away; its exit code comes from _wait

    def _wait(self) -> None:
        try:
            c = self._stream_client.containers.get(self.container.id)
            code = int(c.wait(timeout=STREAM_TIMEOUT)["StatusCode"])
        except Exception:
            status = self._status_code()
            if status is None:
                return
            code = status
        self._status = code

    def _status_code(self) -> int | None:
        try:
            self.container.reload()
        except Exception:
            return 137  # removed under us: treat as killed
        state = self.container.attrs["State"]
        return int(state["ExitCode"]) if state["Status"] in ("exited", "dead") else None

    def poll(self) -> P.HostExit | None:
        return None if self._status is None else P.exit_of(self._status, self.sent)

    def signal(self, sig: int = _signal.SIGTERM) -> None:
        if self._status is not None or self.kept:  # kept: handed off, stays frozen
            return
        if sig not in (_signal.SIGSTOP, _signal.SIGCONT):
            self.sent.add(int(sig))
        try:
            if sig == _signal.SIGSTOP:
                self.container.pause()
            elif sig == _signal.SIGCONT:
                self.container.unpause()
            elif sig == _signal.SIGKILL or not self._signal_all(sig):
                self.container.kill(signal=int(sig))
        except Exception:
            pass  # exited, or already (un)paused

    def _signal_all(self, sig: int) -> bool:
        """Signal every process of the container from here when the engine is local."""
        pids = self.pids()
        if not pids or not self._is_local(pids[0]):
            return False
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return True

    def _is_local(self, pid: int) -> bool:
        try:
            return self.container.id in Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return False

    def pids(self) -> list[int]:
        return engine.container_pids(self.container)

    def join(self, timeout: float) -> None:
        for t in self._threads:
            t.join(timeout)


#: Jobs started by this process and not yet torn down (the atexit backstop tears them down).
_LIVE: set[DockerJob] = set()
_ATEXIT_REGISTERED = False


def _teardown_live() -> None:
    for job in list(_LIVE):
        job.teardown(grace=2.0)


class DockerJob:
    """A started job: its containers, its network, and teardown."""

    def __init__(self, job_id: str, client: Any, network: Any, owner: tuple[int, int],
                 images: Mapping[str, str], writable: Mapping[str, list[str]],
                 spec: LaunchSpec | None = None) -> None:
        self.job_id = job_id
        #: copy mode: the spec whose writable mounts are copied back at teardown (None: bind mode)
        self._copy_spec = spec if spec is not None and files.spec_files(spec) == files.COPY else None
        self._diag_sync: files.DiagSync | None = None
        self.hosts: dict[str, DockerHost] = {}
        self._client = client
        self._network = network
        self._owner = owner
        self._images = images
        self._writable = writable
        self._lock = threading.Lock()
        self._done = False

    def disconnect(self, host: str) -> None:
        self._network.disconnect(self.hosts[host].container, force=True)

    def exec_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["docker", "exec", self.hosts[host].container.name, *argv]

    def keep(self) -> dict[str, Any]:
        """Freeze the containers that still run (SIGSTOP to every process, not ``docker pause``:
        a paused container refuses ``docker exec``) and leave the job's containers and network to
        ``emulator.kept.records`` (teardown no longer touches them; ``reap`` removes them)."""
        kept: dict[str, Any] = {}
        for name, h in self.hosts.items():
            if not (h.started and h.poll() is None):
                continue
            try:
                h.container.reload()
                if h.container.status == "paused":  # a freeze fault
                    h.container.unpause()
                h.container.exec_run(["sh", "-c", "kill -s STOP -- -1"])  # all but PID 1
                h.container.kill(signal="SIGSTOP")  # PID 1, from outside its PID namespace
            except Exception:
                continue  # exited meanwhile
            kept[name] = {"container": h.container.name}
        with self._lock:
            if not kept or self._done:
                return {"hosts": {}}
            self._done = True
        for name in kept:
            self.hosts[name].kept = True
        self._copy_out()  # copy mode: what the hosts wrote so far (they stay frozen in their containers)
        _LIVE.discard(self)
        return {"hosts": kept, "network": self._network.name, "owner": list(self._owner),
                "containers": {n: h.container.name for n, h in self.hosts.items()}}

    def teardown(self, grace: float) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        try:
            self._stop(grace)
            self._copy_out()
            by_image: dict[str, list[str]] = {}
            for name in self.hosts:
                by_image.setdefault(self._images[name], []).extend(self._writable[name])
            for image, sources in by_image.items() if self._copy_spec is None else ():
                reaper.chown_mounts(self._client, image, sources, self._owner,
                              {LABEL_JOB: self.job_id, **owner_labels()})
            for h in self.hosts.values():
                reaper.remove_object(h.container)
                h.join(timeout=2.0)
            reaper.remove_object(self._network)
        finally:
            _LIVE.discard(self)

    def _copy_out(self) -> None:
        """Copy mode: take every host's writable mounts out of its container into this machine's
        folders (where bind mounts would have left them). Nothing in bind mode."""
        if self._copy_spec is None:
            return
        if self._diag_sync is not None:
            self._diag_sync.stop()
        for launch in self._copy_spec.hosts:
            h = self.hosts.get(launch.name)
            if h is None or not h.started:  # never started: it holds only what was put in
                continue
            problems = files.get_outputs(h.container, launch.mounts)
            if problems:  # said where the host's output is read (its log), as the hosts' own lines
                with open(h.log_path, "a") as log:
                    log.writelines(f"[emulator] could not copy {p} out of the container\n" for p in problems)
            files.hand_back([m.source for m in launch.mounts if not m.read_only], self._owner)

    def _stop(self, grace: float) -> None:
        running = [h for h in self.hosts.values() if h.started and h.poll() is None]
        for h in running:
            h.signal(_signal.SIGCONT)  # a paused container cannot receive signals
            h.signal(_signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(h.poll() is None for h in running) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        for h in running:
            if h.poll() is None:
                h.signal(_signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT
        while any(h.poll() is None for h in running) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)


class DockerBackend:
    """Runs each host as a container of the emulator image (or the job's own image).

    ``owner`` is who gets the files containers write as root in bind-mounted folders
    (default: this process's uid and gid).
    """

    name = "docker"
    fast_start = False  # every process starts normally
    shares_machine_filesystem = False  # a container sees only its image and the spec's mounts

    def __init__(self, *, owner: tuple[int, int] | None = None) -> None:
        self.owner = owner if owner is not None else (os.getuid(), os.getgid())

    def check(self, image: str | None = None, *, request: JobRequest | None = None) -> None:
        """The engine answers, and ``image`` (default: the emulator's default image) is on it;
        for a ``request`` whose hosts run a framework family's image, only the engine: ``prepare``
        builds that image on first use and checks it (``nox -s emulate`` needs no default image)."""
        client = engine.client(API_TIMEOUT)
        if request is not None and image is None:
            from . import images

            planned = images.planned(request)
            if planned.dlc is not None and planned.tag != images.DEFAULT_IMAGE:
                return
        self._require_image(client, resolve_image(image))

    @staticmethod
    def _require_image(client: Any, image: str) -> None:
        try:
            client.images.get(image)
        except engine.sdk(".errors").ImageNotFound:
            hint = (f"build it with `{IMAGE_SESSION}` (or `python docker/build.py`)"
                    if image == DEFAULT_IMAGE else f"pull or build it (`docker pull {image}`)")
            raise BackendUnavailable(
                f"docker image {image} is not on this engine: {hint}") from None

    def runtime(self, *, python: str | None = None, request: JobRequest | None = None) -> Runtime:
        """The emulator image: its ``python3``, ``train`` and ``PATH``; the rest of its ``ENV``
        is read from the engine when the launch spec is made. With ``request``: the toolkit
        release of the job's image (what ``prepare`` read from it; the framework table's before)."""
        toolkit: str | None = TOOLKIT_VERSION
        tag: str | None = None  # AlgorithmSpecification.TrainingImage when the request names none
        if request is not None:
            from ...job import frameworks
            from . import images

            image = images.planned(request)
            found = images.facts(image.tag) if image.built else None
            toolkit = (found.training_toolkit if found is not None else
                       None if image.dlc is None else frameworks.family(image.dlc.family).toolkit[0])
            tag = image.tag
        return Runtime(python="python3", train_command=("train",), inhost_root=INHOST_ROOT,
                       base_env={}, path=IMAGE_PATH, toolkit=toolkit, training_image=tag)

    def job_python(self, request: JobRequest) -> str | None:
        return None  # the image's python3

    def prepare(self, request: JobRequest, *, say: Callable[[str], None]) -> list[str]:
        """The job's image (a framework family's is built on first use), what it holds (probed
        once per image), and a wheelhouse for the job's requirements resolved for it."""
        from .. import jobenv
        from . import images, wheelhouse

        image = images.ensure(request, say=say)
        self._require_image(engine.client(API_TIMEOUT), image)
        images.probe(image)
        req = jobenv.requirements_of(request.source_dir, request.requirements_file)
        if req is None:
            return []
        if wheelhouse.lookup(req, image) is None:
            say(f"resolving {req.name} for {image} into a wheelhouse (once; hosts have no egress)")
        house = wheelhouse.prepare(req, image)
        if house.resolved:
            return []
        return [f"{req.name} could not be resolved for {image}, so the hosts' pip will fail "
                f"(InstallRequirementsError, as on SageMaker); pip said: {house.error[-600:]} "
                f"(full output: {house.log})"]

    def prepare_python(self, request: JobRequest, *, scratch: Path, log: Path, env: Mapping[str, str]) -> str | None:
        return None  # the toolkit installs requirements.txt inside the containers

    def job_world(self, request: JobRequest) -> World | None:
        """The image's manifest (probed) and the top-level modules of the wheelhouse's wheels (what
        the hosts' pip installs of the requirements); None before ``prepare``."""
        from .. import jobenv
        from . import images, wheelhouse

        image = images.planned(request)
        found = images.facts(image.tag) if image.built else None
        if found is None or found.modules is None:
            return None
        req = jobenv.requirements_of(request.source_dir, request.requirements_file)
        if req is None:
            return World(found.modules)
        house = wheelhouse.lookup(req, image.tag)
        if house is None or not house.resolved:
            return None
        return World(found.modules, wheelhouse.modules(house))

    @staticmethod
    def _job_image(plan: JobPlan) -> tuple[JobImage, list[Mount], dict[str, Any], list[str]]:
        """The image, the wheelhouse mounts, ``Emulator.Framework`` and what ``prepare`` still has
        to do (for ``plan`` before the first run). Reads only."""
        from ...job import frameworks
        from .. import jobenv
        from . import images, wheelhouse

        request = plan.request
        image = images.planned(request)
        pending = [image.pending] if image.pending else []
        found = images.facts(image.tag) if image.built else None
        if found is None and image.built:
            pending.append(f"{image.tag} is probed for its torch, Python and toolkits before the job starts")
        fam = frameworks.family(image.dlc.family) if image.dlc is not None else None
        framework = frameworks.record(
            request.framework, torch=found.torch if found else fam.torch if fam else None,
            python=found.python if found else fam.python if fam else None,
            toolkit=found.toolkit if found else fam.toolkit if fam else None, image=image.dlc,
            torch_build=images.torch_build(image, found))
        mounts: list[Mount] = []
        req = jobenv.requirements_of(request.source_dir, request.requirements_file)
        house = wheelhouse.lookup(req, image.tag) if req is not None and image.built else None
        if house is not None:
            mounts = [Mount(source, target, read_only=True) for target, source in house.mounts().items()]
        elif req is not None:
            pending.append(f"{req.name} is resolved into a wheelhouse for the image before the job starts, "
                           f"mounted at {wheelhouse.HOST_WHEELHOUSE} with {wheelhouse.HOST_PIP_CONF}")
        return image, mounts, framework, pending

    def launch_spec(self, plan: JobPlan, *, job_id: str, scratch: Path, logs: Path) -> LaunchSpec:
        from ..materialise import host_mounts

        client = engine.client(API_TIMEOUT)
        job_image, extra_mounts, framework, pending = self._job_image(plan)
        image = job_image.tag
        config: dict[str, Any] = {}
        if job_image.built:  # a family image not built yet has no ENV to read: `pending` says so
            self._require_image(client, image)
            try:
                config = client.images.get(image).attrs.get("Config") or {}
            except engine.sdk(".errors").DockerException as e:
                raise engine_error(f"inspect the image {image}", e) from None
        image_env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        entrypoint = tuple(config.get("Entrypoint") or ())
        if plan.request.container_command:  # ContainerEntrypoint replaces the image's, as on SageMaker
            entrypoint = ()
        # what the emulator image's ENTRYPOINT (a bash script that execs the command) adds;
        # another image's entrypoint may add variables the spec cannot know
        added = {**ENTRYPOINT_ENV, "PWD": P.CODE_DIR} if entrypoint == (ENTRYPOINT,) else {}
        try:
            subnet = _free_subnet(client, P.JOB_SUBNET, plan.request.job_name)
        except engine.sdk(".errors").DockerException as e:
            raise engine_error("list its networks (to choose the job's subnet)", e) from None
        addresses = host_addresses(subnet, [h.name for h in plan.hosts])
        etc_hosts = hosts_file(addresses)
        diag = Mount(scratch / "diagnostics", P.DIAG_DIR)
        inhost = Mount(_inhost_source(), INHOST_ROOT, read_only=True)
        probe_labels = {LABEL_JOB: job_id, **job_labels(scratch)}
        mode, why = files.files_mode(client, image if job_image.built else None, probe_labels, [
            inhost, diag, *extra_mounts,
            *(m for host in plan.hosts for m in host_mounts(plan, host.name))])
        launches = []
        for host in plan.hosts:
            # docker sets HOSTNAME, and HOME for root when the image has none
            env = {**image_env, "HOME": image_env.get("HOME", "/root"), **host.env, "HOSTNAME": host.name,
                   **added}
            mounts = (*host_mounts(plan, host.name), inhost, diag,
                      Mount(scratch / host.name / "hosts", "/etc/hosts", read_only=True), *extra_mounts)
            launches.append(HostLaunch(
                name=host.name, address=addresses[host.name], command=tuple(host.command), env=env,
                workdir=P.CODE_DIR, mounts=mounts, hosts_file=etc_hosts,
                log_path=logs / f"{host.name}{RAW_SUFFIX}", argv=(*entrypoint, *host.command), image=image,
                labels={LABEL_JOB: job_id, LABEL_HOST: host.name,
                        "sagemaker-emulator.job-name": plan.request.job_name, **job_labels(scratch)}))
        return LaunchSpec(backend=self.name, job_id=job_id, subnet=subnet, hosts=tuple(launches),
                          scratch=scratch,
                          options={"shm_size": SHM_SIZE, "user": "0", "files": mode, "files_reason": why,
                                   **({"etc_hosts": "the engine's, with every algo-N of hosts_file added (--add-host)"}
                                      if mode == files.COPY else {}),
                                   "entrypoint": "request" if plan.request.container_command else "image",
                                   "framework": framework, **({"pending": pending} if pending else {}),
                                   **names_and_ssh(job_id, [h.name for h in plan.hosts], scratch)})

    def start(self, spec: LaunchSpec) -> DockerJob:
        global _ATEXIT_REGISTERED
        client = engine.client(API_TIMEOUT)
        labels = {LABEL_JOB: spec.job_id, **job_labels(spec.scratch)}
        for h in spec.hosts:
            hosts = spec.scratch / h.name / "hosts"
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text(h.hosts_file)
            for m in h.mounts:
                if not m.read_only:
                    m.source.mkdir(parents=True, exist_ok=True)
        images = {h.name: h.image or DEFAULT_IMAGE for h in spec.hosts}
        writable = {h.name: [str(m.source) for m in h.mounts if not m.read_only] for h in spec.hosts}
        copy = files.spec_files(spec) == files.COPY
        dexc = engine.sdk(".errors").DockerException
        try:
            network = _create_network(client, spec, labels)
        except dexc as e:
            raise engine_error(f"create the job network {network_name(spec.job_id)} on {spec.subnet}", e) from None
        handle = DockerJob(spec.job_id, client, network, self.owner, images, writable, spec)
        step = "make the cluster's ssh keys"
        try:
            private, public = _make_keypair(spec.scratch / "ssh")
            keys = _ssh_archive(private, public, _make_keypair(spec.scratch / "ssh", "host_key", "ed25519"))
            stream_client = engine.client(STREAM_TIMEOUT)
            for h in spec.hosts:
                step = f"create the container of {h.name} from {h.image}"
                container = _create_container(client, h, spec, network.name, labels, copy=copy)
                handle.hosts[h.name] = DockerHost(h.name, container, h.log_path, stream_client)
                step = f"copy the files of {h.name} into its container"
                container.put_archive("/", keys)
                if copy:
                    files.put_inputs(container, h.mounts)
            for dh in handle.hosts.values():
                step = f"start the container of {dh.name}"
                Path(dh.log_path).parent.mkdir(parents=True, exist_ok=True)
                dh.container.start()
                dh._follow()
            if copy:
                diag = next((m.source for m in spec.hosts[0].mounts if m.target == P.DIAG_DIR), None)
                if diag is not None:
                    handle._diag_sync = files.DiagSync({n: dh.container for n, dh in handle.hosts.items()}, diag)
                    handle._diag_sync.start()
        except dexc as e:
            handle.teardown(grace=0)
            raise engine_error(step, e) from None
        except BaseException:
            handle.teardown(grace=0)
            raise
        _LIVE.add(handle)
        if not _ATEXIT_REGISTERED:
            atexit.register(_teardown_live)
            _ATEXIT_REGISTERED = True
        return handle


    # -- kept hosts and what killed runs left (emulator/kept/records.py, emulator/kept/reap.py); see docker_kept.py
    def attach(self, record: Mapping[str, Any]) -> KeptHosts:
        from .kept import DockerKeptHosts

        return DockerKeptHosts(record)

    def reap_leftovers(self, scratch: Path, *, job_name: str, owner_pid: int) -> list[str]:
        from .kept import reap_leftovers

        return reap_leftovers(scratch, job_name=job_name)

    def reap_orphans(self) -> list[str]:
        from .kept import reap_orphans

        return reap_orphans()


def names_and_ssh(job_id: str, hosts: Sequence[str], scratch: Path) -> dict[str, Any]:
    """What ``start`` names and writes besides the hosts, for the launch spec's ``options``: the
    job network's and each container's name, and the ssh material every container gets (a fresh
    cluster key pair and sshd host key per job, made when the job starts)."""
    return {"network": network_name(job_id), "containers": {h: container_name(job_id, h) for h in hosts},
            "ssh": {"made_at_start_in": str(scratch / "ssh"),
                    "in_host": [f"/root/.ssh/{KEY_NAME}", f"/root/.ssh/{KEY_NAME}.pub", "/root/.ssh/authorized_keys",
                                "/root/.ssh/config", f"/etc/ssh/{HOST_KEY}", f"/etc/ssh/{HOST_KEY}.pub"]}}


def _inhost_source() -> Path:
    from ...inhost import ROOT

    return ROOT


def _taken_subnets(client: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    taken = []
    for n in client.networks.list():
        for pool in ((n.attrs.get("IPAM") or {}).get("Config") or []):
            if pool.get("Subnet"):
                try:
                    taken.append(ipaddress.ip_network(pool["Subnet"], strict=False))
                except ValueError:
                    continue
    return taken


def _free_subnet(client: Any, planned: str, key: str = "") -> str:
    """The first /24 that no network of the engine overlaps, among the :data:`SUBNET_TRIES` from
    ``planned`` on, starting at the one ``key`` (the job's name) picks and wrapping around.

    Keyed, so that ``plan`` and ``run`` of one job name choose the same subnet although other jobs
    come and go between them (from the first /24 each, a job planned while another ran got the
    next one, and ran on the first once that job had ended); only a job holding the key's own
    subnet when the job starts moves it."""
    taken = _taken_subnets(client)
    first = ipaddress.ip_network(planned)
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % SUBNET_TRIES if key else 0
    for k in ((start + i) % SUBNET_TRIES for i in range(SUBNET_TRIES)):
        subnet = ipaddress.ip_network((int(first.network_address) + k * first.num_addresses, first.prefixlen))
        if not any(subnet.overlaps(t) for t in taken if t.version == subnet.version):
            return str(subnet)
    raise BackendUnavailable(f"no free /24 subnet near {planned} for the job network "
                             f"(tried {SUBNET_TRIES}); remove stale networks with `python -m emulator reap`")


#: How many neighbouring /24 subnets to consider when concurrent jobs hold the first.
SUBNET_TRIES = 64


def _create_network(client: Any, spec: LaunchSpec, labels: Mapping[str, str]) -> Any:
    """The job's bridge network on the spec's subnet (internal unless the job allows egress).
    Raises :class:`SubnetTaken` when a concurrent job took the subnet since the spec was made."""
    types = engine.sdk(".types")
    ipam = types.IPAMConfig(pool_configs=[types.IPAMPool(subnet=spec.subnet)])
    try:
        return client.networks.create(network_name(spec.job_id), ipam=ipam, driver="bridge",
                                      internal=not spec.allow_egress, labels=dict(labels),
                                      check_duplicate=True)
    except engine.sdk(".errors").APIError as e:
        if "overlap" in str(e).lower():
            raise SubnetTaken(spec.subnet) from e
        raise


def _create_container(client: Any, host: HostLaunch, spec: LaunchSpec, network: str,
                      labels: Mapping[str, str], *, copy: bool = False) -> Any:
    """The host's container, created, not started. ``copy``: no bind mounts (the files are put into
    it next) and ``/etc/hosts`` made by the engine from the spec's names (``--add-host``)."""
    dmount = engine.sdk(".types").Mount
    mounts = [] if copy else [dmount(m.target, str(m.source), type="bind", read_only=m.read_only)
                              for m in host.mounts]
    endpoint = client.api.create_endpoint_config(aliases=[host.name], ipv4_address=host.address)
    override = spec.options.get("entrypoint") == "request"
    return client.containers.create(
        host.image, command=[] if override else list(host.command),
        entrypoint=list(host.command) if override else None, name=container_name(spec.job_id, host.name),
        hostname=host.name, environment=dict(host.env), working_dir=host.workdir or None, mounts=mounts,
        labels={**host.labels, **labels}, network=network, networking_config={network: endpoint},
        extra_hosts=files.extra_hosts(host) if copy else None,
        shm_size=spec.options.get("shm_size", SHM_SIZE), user=spec.options.get("user", "0"),
        stdin_open=False, tty=False, detach=True)
