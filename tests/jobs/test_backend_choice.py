"""``--backend auto`` (emulator/backends/choose.py) against real failure modes.

The probe is run for real inside sandboxes that deny what CI runners deny: a bubblewrap sandbox
without capabilities (as a container without ``CAP_SYS_ADMIN``: ``unshare`` gets EPERM), one
where no further user namespace may be made (``bwrap --disable-userns``: ENOSPC, as with
``user.max_user_namespaces=0``; user_namespaces(7)), a socket this user may not open (EACCES, as
for a user outside the ``docker`` group), and a docker container with docker's default seccomp
profile (moby/profiles ``seccomp/default.json``: ``unshare`` only with ``CAP_SYS_ADMIN``).
Expected outcomes come from those kernel and docker rules and from the issue's contract (process
where namespaces work, docker where they do not and an engine answers, else exit 3 with one
paragraph), not from the module's own code.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from emulator.backends import choose, get_backend
from emulator.errors import RequestError

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "sagemaker-emulator:latest"


def _sandboxed(*bwrap: str, env: dict[str, str] | None = None, cache: Path) -> subprocess.CompletedProcess[str]:
    """``python -m emulator.backends.choose`` (this checkout) inside a bwrap sandbox."""
    setenv = [a for k, v in {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache), **(env or {})}.items()
              for a in ("--setenv", k, v)]
    return subprocess.run(["bwrap", "--dev-bind", "/", "/", "--unshare-user", *bwrap, *setenv,
                           sys.executable, "-m", "emulator.backends.choose"],
                          capture_output=True, text=True, timeout=120, check=False)


def _engine_here() -> bool:
    ok, _ = choose.engine()
    return ok


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="needs bubblewrap, run as root (its sandbox user maps to root's socket)")
needs_engine = pytest.mark.skipif(not _engine_here(), reason="needs a docker engine")


def test_auto_picks_the_process_backend_where_namespaces_work() -> None:
    probe = choose.probe_process()
    assert probe.ok, probe.detail
    backend = get_backend("auto")
    assert backend.name == "process"
    assert choose.describe(backend)["BackendReason"].startswith("auto: this machine allows")


def test_a_named_backend_is_used_as_asked() -> None:
    assert choose.choose("docker") == choose.Choice("docker", "--backend docker (asked for)")
    with pytest.raises(RequestError) as err:
        get_backend("podman")
    assert err.value.field == "backend" and "auto" in str(err.value.allowed)


def test_the_probe_is_cached_per_boot_and_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = choose.probe_cached()
    stored = json.loads(next((tmp_path / "sagemaker-emulator").glob("backend-probe-*.json")).read_text())
    assert stored["key"]["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert stored["key"]["uid"] == os.getuid() and stored["ok"] == first.ok
    path = next((tmp_path / "sagemaker-emulator").glob("backend-probe-*.json"))
    path.write_text(json.dumps({**stored, "ok": False, "detail": "stored"}))
    assert choose.probe_cached() == choose.Probe(False, "stored")  # same boot and user: not probed again
    path.write_text(json.dumps({**stored, "key": {**stored["key"], "boot_id": "another boot"}, "ok": False,
                                "detail": "stored"}))
    assert choose.probe_cached() == first  # another boot: probed again


@needs_bwrap
def test_without_capabilities_and_no_engine_nothing_starts(tmp_path: Path) -> None:
    """uid 0 without CAP_SYS_ADMIN (a container's root): ``unshare`` is refused (EPERM); no engine."""
    done = _sandboxed("--uid", "0", "--gid", "0", "--cap-drop", "ALL", cache=tmp_path,
                      env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["probe"]["ok"] is False
    paragraph = done.stderr.strip()
    assert "\n" not in paragraph and paragraph.startswith("error: --backend auto found no backend")
    assert "Operation not permitted" in paragraph  # EPERM from unshare(2)
    assert f"unix://{tmp_path}/no-engine.sock" in paragraph and "nothing was started" in paragraph


@needs_bwrap
@needs_engine
def test_without_capabilities_an_answering_engine_is_chosen(tmp_path: Path) -> None:
    done = _sandboxed("--uid", "0", "--gid", "0", "--cap-drop", "ALL", cache=tmp_path)
    assert done.returncode == 0, done.stderr
    chosen = json.loads(done.stdout)
    assert chosen["backend"] == "docker" and "Operation not permitted" in chosen["reason"]


@needs_bwrap
def test_no_further_user_namespaces_names_the_limit(tmp_path: Path) -> None:
    """As an ordinary user where no user namespace may be made: ENOSPC names max_user_namespaces."""
    done = _sandboxed("--uid", "1000", "--gid", "1000", "--disable-userns", cache=tmp_path,
                      env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert done.returncode == 3, done.stderr
    assert "No space left on device" in done.stderr and "user.max_user_namespaces" in done.stderr


@needs_bwrap
def test_a_socket_this_user_may_not_open_names_the_endpoint_and_the_fix(tmp_path: Path) -> None:
    """A socket whose mode denies this user (without CAP_DAC_OVERRIDE): EACCES on connect(2)."""
    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        path.chmod(0)
        done = _sandboxed("--uid", "0", "--gid", "0", "--cap-drop", "ALL", cache=tmp_path,
                          env={"DOCKER_HOST": f"unix://{path}"})
    assert done.returncode == 3, done.stderr
    assert f"unix://{path}" in done.stderr and "usermod -aG docker" in done.stderr
    assert "Permission denied" in done.stderr


@needs_engine
def test_in_a_container_with_default_seccomp_the_error_says_privileged_or_socket(tmp_path: Path) -> None:
    from emulator.backends.docker import engine

    try:
        engine.image_id(IMAGE)
    except Exception as exc:
        pytest.skip(f"needs {IMAGE}: {exc}")
    name = f"sm-emulator-test-choose-{uuid.uuid4().hex[:8]}"
    try:
        done = subprocess.run(["docker", "run", "--rm", "--name", name, "--network", "none",
                               "-v", f"{ROOT / 'emulator'}:/src/emulator:ro", "-e", "PYTHONPATH=/src",
                               "--entrypoint", "python3", IMAGE, "-m", "emulator.backends.choose"],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert done.returncode == 3, done.stderr
    assert "Operation not permitted" in json.loads(done.stdout)["probe"]["detail"]
    assert "--privileged" in done.stderr and "/var/run/docker.sock" in done.stderr


@needs_engine
def test_images_and_wheelhouse_need_no_docker_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker SDK only (as in a container with the project pip-installed and no docker CLI):
    image ids and what an image holds, checked against the CLI's own answers."""
    from emulator.backends.docker import engine, images, wheelhouse
    from emulator.errors import BackendUnavailable

    cli = shutil.which("docker")
    if cli is None:
        pytest.skip("needs the docker CLI as the oracle")
    try:
        engine.image_id(IMAGE)
    except BackendUnavailable as exc:
        pytest.skip(f"needs {IMAGE}: {exc}")
    expected_id = subprocess.run([cli, "image", "inspect", "-f", "{{.Id}}", IMAGE], capture_output=True,
                                 text=True, check=True).stdout.strip()
    expected_python = subprocess.run([cli, "run", "--rm", "--network", "none", "--entrypoint", "python3", IMAGE,
                                      "-c", "import platform; print(platform.python_version())"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    monkeypatch.setenv("PATH", str(tmp_path))  # no docker CLI from here on
    monkeypatch.setattr(images, "PROBES", tmp_path / "probes")
    assert wheelhouse.image_id(IMAGE) == expected_id
    assert images.probe(IMAGE).python == expected_python
    with pytest.raises(BackendUnavailable) as err:
        wheelhouse.image_id(f"sagemaker-emulator:no-such-tag-{uuid.uuid4().hex[:6]}")
    assert engine.endpoint() in str(err.value) and "nox -s image" in str(err.value)


# -- python -m emulator doctor: the same probes, so it cannot disagree with auto --------------------


def _doctor(*bwrap: str, env: dict[str, str] | None = None, cache: Path,
            sandbox: bool = True) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """``python -m emulator doctor --json`` (this checkout), in the same kind of sandbox as
    :func:`_sandboxed` (or without one), and its checks by name."""
    full = {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache), **(env or {})}
    if sandbox:
        setenv = [a for k, v in full.items() for a in ("--setenv", k, v)]
        argv = ["bwrap", "--dev-bind", "/", "/", "--unshare-user", *bwrap, *setenv]
    else:
        argv = []
    done = subprocess.run([*argv, sys.executable, "-m", "emulator", "doctor", "--json"], capture_output=True,
                          text=True, timeout=120, check=False, env=None if sandbox else {**os.environ, **full})
    assert done.stdout, done.stderr
    return done, {c["name"]: c for c in json.loads(done.stdout)}


def _auto(done: subprocess.CompletedProcess[str]) -> str | None:
    """The backend ``python -m emulator.backends.choose`` picked, None when it refused (exit 3)."""
    return json.loads(done.stdout.splitlines()[0]).get("backend") if done.returncode == 0 else None


def test_doctor_here_agrees_with_auto(tmp_path: Path) -> None:
    done, checks = _doctor(cache=tmp_path, sandbox=False)
    assert done.returncode == 0 and checks["process"]["ok"] is True, checks
    assert checks["auto"]["ok"] is True and checks["auto"]["detail"].startswith(f"{get_backend('auto').name}: ")
    assert set(checks) == {"process", "docker", "mpi", "disk", "auto"}


@needs_bwrap
def test_doctor_without_capabilities_and_no_engine_exits_1_naming_both_fixes(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    sandbox = ("--uid", "0", "--gid", "0", "--cap-drop", "ALL")
    done, checks = _doctor(*sandbox, env=env, cache=tmp_path)
    assert done.returncode == 1, done.stderr
    assert not checks["process"]["ok"] and "Operation not permitted" in checks["process"]["detail"]  # EPERM
    assert not checks["docker"]["ok"] and f"unix://{tmp_path}/no-engine.sock" in checks["docker"]["detail"]
    assert checks["process"]["fix"] and checks["docker"]["fix"]
    assert not checks["auto"]["ok"] and _auto(_sandboxed(*sandbox, env=env, cache=tmp_path)) is None


@needs_bwrap
@needs_engine
def test_doctor_without_capabilities_picks_the_engine_as_auto_does(tmp_path: Path) -> None:
    sandbox = ("--uid", "0", "--gid", "0", "--cap-drop", "ALL")
    done, checks = _doctor(*sandbox, cache=tmp_path)
    assert not checks["process"]["ok"] and checks["auto"]["ok"], checks
    assert _auto(_sandboxed(*sandbox, cache=tmp_path)) == "docker"
    assert checks["auto"]["detail"].startswith("docker: ")
    assert done.returncode == (0 if checks["docker"]["ok"] else 1)  # the docker row also needs the image


@needs_bwrap
def test_doctor_where_no_user_namespace_may_be_made_names_the_sysctl(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    sandbox = ("--uid", "1000", "--gid", "1000", "--disable-userns")
    done, checks = _doctor(*sandbox, env=env, cache=tmp_path)
    assert done.returncode == 1 and "No space left on device" in checks["process"]["detail"]  # ENOSPC
    assert "user.max_user_namespaces" in checks["process"]["fix"]
    assert _auto(_sandboxed(*sandbox, env=env, cache=tmp_path)) is None


def test_doctor_without_the_tools_names_each_package(tmp_path: Path) -> None:
    """A PATH without bwrap, mpirun, ssh and ssh-keygen (unshare and ip kept: the probe still runs)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("unshare", "nsenter", "ip", "sh", "grep"):
        found = shutil.which(tool)
        assert found, tool
        (tools / tool).symlink_to(found)
    env = {"PATH": str(tools), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done, checks = _doctor(cache=tmp_path, env=env, sandbox=False)
    assert not checks["process"]["ok"] and checks["process"]["detail"].startswith("missing bwrap")
    assert "bubblewrap" in checks["process"]["fix"]
    for tool, package in (("mpirun", "openmpi-bin"), ("ssh-keygen", "openssh-client")):
        assert f"{tool} ({package})" in checks["mpi"]["detail"]
    assert done.returncode == 1 and not checks["auto"]["ok"]
