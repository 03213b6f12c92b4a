"""``--backend auto``: pick the process backend where this machine allows its namespaces, else
the docker backend where an engine answers, else refuse before anything starts.

The process backend's needs are probed by doing them, not by reading sysctls (on Ubuntu 24.04
``unshare -U true`` succeeds and the next step fails:
https://github.com/actions/runner-images/issues/11489). With the same tools the backend uses
(``unshare``, ``ip``, ``bwrap``), one short command writes a uid map (when not root), brings
``lo`` up in a new network namespace, mounts ``/proc`` in a new PID namespace, and starts a
``bwrap`` host the way
:func:`emulator.backends.process.backend.bwrap_argv` does. The result is cached per boot
(``/proc/sys/kernel/random/boot_id``) and user, under the user's cache folder, keyed also by the
settings that decide it (the sysctls below, the tools' paths), so changing one of them probes
again. The docker engine is asked each time (a ping is cheap, and engines come and go).

Which backend was chosen and why is said on the console and in ``job.json``
(``Emulator.Backend``, ``Emulator.BackendReason``). An explicitly named backend is used as asked.

Not emulated: anything of SageMaker; this is about where the emulator itself can run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..cache import cache_dir
from ..errors import BackendUnavailable
from .base import AUTO
from .docker import engine as eng
from .docker.engine import in_container

PROBE_TIMEOUT = 30.0
TOOLS = ("unshare", "nsenter", "ip", "bwrap")  # the process backend's (emulator/backends/process/backend.py TOOLS)
#: Settings that decide whether unprivileged namespaces work (a changed one probes again).
SYSCTLS = ("kernel/apparmor_restrict_unprivileged_userns", "user/max_user_namespaces",
           "kernel/unprivileged_userns_clone")
APPARMOR_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"
#: Run inside the new user (when not root), network, PID and mount namespaces: what the process
#: backend's job agent and its hosts do first.
INSIDE = ("ip link set lo up && ip -o addr show dev lo | grep -q 'inet 127.0.0.1' && "
          "unshare --net -- bwrap --dev-bind / / --unshare-uts --unshare-pid --unshare-ipc "
          "--hostname algo-probe --die-with-parent --as-pid-1 --proc /proc true")


@dataclass(frozen=True)
class Probe:
    """Whether the process backend's namespaces work here, and if not, what failed."""

    ok: bool
    detail: str  #: what failed (the tools' own words), or what was proven


@dataclass(frozen=True)
class Choice:
    """The backend ``auto`` (or the caller) chose, and why."""

    backend: str
    reason: str


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def sysctls() -> dict[str, str | None]:
    return {name.replace("/", "."): _read(f"/proc/sys/{name}") for name in SYSCTLS}


def probe_command(*, bwrap: bool = True) -> list[str]:
    """The probe: the process backend's namespaces (``bwrap=False``: without its bwrap host)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    inside = INSIDE if bwrap else INSIDE.split(" && unshare ")[0]
    return ["unshare", *user, "--net", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc",
            "--", "sh", "-c", inside]


def _run(argv: list[str]) -> str | None:
    """None when ``argv`` succeeds, else what failed (its own words)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"the namespace probe did not finish within {PROBE_TIMEOUT:.0f} s"
    if done.returncode == 0:
        return None
    return " ".join((done.stderr or done.stdout).split())[-400:] or f"exit {done.returncode}"


def probe_process() -> Probe:
    """Do what the process backend needs, once, now (no cache)."""
    if sys.platform != "linux":
        return Probe(False, f"this is {sys.platform}, not Linux: the process backend needs Linux namespaces")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if {"unshare", "ip"} & set(missing):
        return Probe(False, f"missing {', '.join(missing)} (Debian: util-linux, iproute2, bubblewrap)")
    # Without bwrap the namespaces are still tried, so the cause shown is the whole one.
    done = _run(probe_command(bwrap="bwrap" not in missing))
    if missing:
        why = done if done is not None else "the namespaces themselves work"
        return Probe(False, f"missing {', '.join(missing)} (Debian: util-linux, bubblewrap); {why}")
    if done is not None:
        return Probe(False, done)
    uid_map = "as root, no uid map needed" if os.geteuid() == 0 else "a uid map"
    return Probe(True, f"{uid_map}, loopback in a new network namespace, /proc in a new PID namespace "
                       "and a bwrap host all work")


def _cache_file() -> Path:
    return cache_dir(f"backend-probe-{os.getuid()}.json")


def _cache_key() -> dict[str, Any]:
    return {"boot_id": _read("/proc/sys/kernel/random/boot_id"), "uid": os.getuid(), "euid": os.geteuid(),
            "sysctls": sysctls(), "tools": {t: shutil.which(t) for t in TOOLS}}


def probe_cached() -> Probe:
    """:func:`probe_process`, cached per boot and user (and the settings that decide it)."""
    key = _cache_key()
    path = _cache_file()
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return Probe(bool(stored["ok"]), str(stored["detail"]))
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    result = probe_process()
    if key["boot_id"] is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, **asdict(result)}))
            tmp.replace(path)
        except OSError:
            pass  # a read-only home: probe again next time
    return result


def process_cause(probe: Probe, *, container: bool | None = None,
                  settings: dict[str, str | None] | None = None, euid: int | None = None) -> str:
    """Why the process backend cannot run here, and what fixes it (one or two sentences)."""
    container = in_container() if container is None else container
    settings = sysctls() if settings is None else settings
    euid = os.geteuid() if euid is None else euid
    if probe.detail.startswith("missing ") and not container:
        return f"the process backend needs tools that are not installed: {probe.detail}; install them"
    if "no space left on device" in probe.detail.lower():  # ENOSPC: the user-namespace limit is 0 or reached
        return (f"user namespaces are disabled here or their limit is reached ({probe.detail}); raise "
                "user.max_user_namespaces (`sudo sysctl -w user.max_user_namespaces=15000`)"
                + (", or run this container with --privileged, or mount the docker engine's socket into it"
                   if container else ", or run as root"))
    if container:
        return ("this runs inside a container, where the process backend cannot run "
                f"({probe.detail}; docker's default seccomp and AppArmor profiles refuse new namespaces): "
                "run that container with --privileged (or --cap-add SYS_ADMIN --security-opt seccomp=unconfined "
                "--security-opt apparmor=unconfined) with bubblewrap, util-linux and iproute2 installed, "
                "or mount the docker engine's socket into it (-v /var/run/docker.sock:"
                "/var/run/docker.sock) so the docker backend can be used")
    if settings.get(APPARMOR_SYSCTL) == "1" and euid != 0:
        return (f"AppArmor restricts unprivileged user namespaces ({APPARMOR_SYSCTL}=1, as on Ubuntu 24.04 "
                f"and GitHub's ubuntu-latest; {probe.detail}); run `sudo sysctl -w {APPARMOR_SYSCTL}=0`, "
                "or run as root (e.g. `sudo -E env PATH=$PATH ...`)")
    if settings.get("user.max_user_namespaces") == "0" or settings.get("kernel.unprivileged_userns_clone") == "0":
        return (f"user namespaces are disabled ({probe.detail}); run `sudo sysctl -w user.max_user_namespaces="
                "15000` (and `kernel.unprivileged_userns_clone=1` where it exists), or run as root")
    return f"creating the namespaces failed ({probe.detail})"


def engine() -> tuple[bool, str]:
    """Whether a docker engine answers (the docker SDK's ping), and where / why not."""
    try:
        eng.client()
    except BackendUnavailable as e:
        return False, str(e)
    return True, eng.endpoint()


def decide(probe: Probe, engine_ok: bool, engine_detail: str, *, cause: str | None = None) -> Choice:
    """The backend for ``auto``: process if its probe passed, else docker if an engine answers,
    else :class:`BackendUnavailable` naming both causes and their fixes."""
    if probe.ok:
        return Choice("process", f"auto: this machine allows the process backend's namespaces ({probe.detail})")
    cause = cause or process_cause(probe)
    if engine_ok:
        return Choice("docker", f"auto: the process backend cannot run here ({cause}); the docker engine at "
                                f"{engine_detail} answers")
    raise BackendUnavailable(
        f"--backend auto found no backend that can run here, so nothing was started. The process backend "
        f"cannot: {cause}. The docker backend cannot: {engine_detail}. Fix one of the two (for the docker "
        "backend: start an engine or mount its socket, and pip install 'sagemaker-cluster-emulator[docker]'), "
        "or name a backend with --backend process|docker to see only its error.")


_CHOSEN: Choice | None = None


def choose(name: str) -> Choice:
    """The backend to use for ``name`` (``auto``, or one named explicitly) and why."""
    global _CHOSEN
    if name != AUTO:
        return Choice(name, f"--backend {name} (asked for)")
    probe = probe_cached()
    if probe.ok:
        return decide(probe, False, "")
    if _CHOSEN is not None and _CHOSEN.backend == "docker":  # this process already pinged it
        return _CHOSEN
    ok, detail = engine()
    _CHOSEN = decide(probe, ok, detail)
    return _CHOSEN


def describe(backend: object) -> dict[str, str]:
    """``job.json``'s ``Emulator.BackendReason`` for a backend :func:`emulator.backends.get_backend`
    made (empty for a backend object the caller made itself)."""
    choice = getattr(backend, "choice", None)
    return {"BackendReason": choice.reason} if isinstance(choice, Choice) else {}


def main() -> int:
    """``python -m emulator.backends.choose``: print what ``auto`` decides here (no cache), as JSON;
    exit 3 with the error paragraph when nothing can run."""
    probe = probe_process()
    ok, detail = engine()
    try:
        choice = decide(probe, ok, detail)
    except BackendUnavailable as e:
        print(json.dumps({"probe": asdict(probe), "engine": ok}))
        print(f"error: {e}", file=sys.stderr)
        return 3
    print(json.dumps({"probe": asdict(probe), "engine": ok, "backend": choice.backend, "reason": choice.reason}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
