"""The docker engine, through the docker Python SDK only (no ``docker`` CLI at run time).

:func:`client` connects as the SDK does (``DOCKER_HOST``, ``DOCKER_TLS_VERIFY``,
``DOCKER_CERT_PATH``, else the local socket) and turns every way an engine can fail to answer or
refuse (SDK not installed, no engine, no permission on the socket, an API too old) into a
:class:`~emulator.errors.BackendUnavailable` that names the endpoint and the fix, never a
traceback. :func:`image_id` and :func:`run_helper` are what :mod:`emulator.backends.docker.images` and
:mod:`emulator.backends.docker.wheelhouse` need. Building images (``docker/build.py``, ``nox -s image``) still
uses the CLI.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import BackendUnavailable

API_TIMEOUT = 60.0
#: The oldest engine API the docker SDK 7 supports (docker-py ``docker/constants.py``
#: MINIMUM_DOCKER_API_VERSION).
MIN_API = "1.24"


def sdk(sub: str = "") -> Any:
    """The docker SDK (or one of its modules). Typed Any: the SDK has no stubs."""
    try:
        return importlib.import_module(f"docker{sub}")
    except ImportError as e:
        raise BackendUnavailable("the docker engine is used through the docker SDK, which is not installed: "
                                 "pip install 'sagemaker-cluster-emulator[docker]'") from e


def endpoint() -> str:
    """Where the SDK connects (what ``docker.from_env`` reads)."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def explain(e: BaseException) -> str:
    """What an engine connection error means and what to do, with the endpoint."""
    where = endpoint()
    text = f"{e.__class__.__name__}: {e}"
    low = text.lower()
    if "permission denied" in low:
        return (f"the docker engine at {where} refused this user ({text}); add the user to the socket's group "
                "(`sudo usermod -aG docker $USER`, then log in again), or run as root")
    if ("client version" in low and "too old" in low) or "minimum supported api version" in low:
        return (f"the docker engine at {where} speaks an API this docker SDK does not ({text}); set "
                "DOCKER_API_VERSION to the engine's version, or upgrade the engine")
    if "no such file" in low or "filenotfounderror" in low or "connection refused" in low \
            or "connection aborted" in low or "name or service not known" in low or "timed out" in low:
        hint = ("mount the engine's socket into this container (-v /var/run/docker.sock:/var/run/docker.sock) "
                "or set DOCKER_HOST" if in_container() else
                "start one (`systemctl start docker`), or set DOCKER_HOST to the engine's address")
        return f"no docker engine answers at {where} ({text}); {hint}"
    return f"the docker engine at {where} did not answer ({text}); check DOCKER_HOST and the engine"


def in_container() -> bool:
    """True inside a docker/podman/Kubernetes container (what testcontainers checks, and more)."""
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    try:
        cgroup = Path("/proc/1/cgroup").read_text()
    except OSError:
        cgroup = ""
    return any(word in cgroup for word in ("docker", "kubepods", "containerd", "libpod"))


def client(timeout: float = API_TIMEOUT) -> Any:
    """A docker SDK client whose engine has just answered a ping."""
    docker = sdk()
    try:
        made = docker.from_env(timeout=timeout)
        made.ping()
    except Exception as e:  # the SDK raises DockerException, requests' and OSError's kinds
        raise BackendUnavailable(explain(e)) from None
    return made


def data_root() -> str | None:
    """The engine's data folder (``docker info``'s ``DockerRootDir``), or None when it cannot say."""
    try:
        return str(client().info().get("DockerRootDir") or "") or None
    except Exception:  # an engine that cannot answer: the build itself then says what is wrong
        return None


def image_id(image: str) -> str:
    """The id of ``image`` on the engine; :class:`BackendUnavailable` when it is not there."""
    c = client()
    try:
        return str(c.images.get(image).id)
    except sdk(".errors").ImageNotFound:
        raise BackendUnavailable(f"docker image {image} is not on the engine at {endpoint()}: build it with "
                                 "`nox -s image` (or `python docker/build.py`) on a machine that uses this engine, "
                                 "or load it (`docker load`)") from None
    except Exception as e:  # APIError, or the engine went away (requests' errors)
        raise BackendUnavailable(f"the docker engine at {endpoint()} could not inspect {image}: "
                                 f"{explain(e)}") from None


def run_helper(image: str, command: Sequence[str], *, name: str, labels: Mapping[str, str], entrypoint: str,
               network: str, volumes: Mapping[str, Mapping[str, str]] | None = None,
               environment: Mapping[str, str] | None = None, timeout: float,
               before_start: Callable[[Any], None] | None = None,
               after_end: Callable[[Any], object] | None = None) -> tuple[int | None, str, str]:
    """Run a short-lived helper container to its end; (exit status or None on timeout, stdout,
    stderr). ``before_start``/``after_end`` get the container (created / ended), e.g. to copy
    files in and out through the engine's API. The container is removed whatever happens."""
    c = client()
    container = None
    try:
        container = c.containers.create(image, list(command), name=name, labels=dict(labels),
                                        entrypoint=entrypoint, network=network, volumes=dict(volumes or {}),
                                        environment=dict(environment or {}), stdin_open=False, detach=True)
        if before_start is not None:
            before_start(container)
        container.start()
        try:
            status: int | None = int(container.wait(timeout=timeout).get("StatusCode", 1))
        except Exception as e:  # requests' ReadTimeout (the SDK does not wrap it)
            if "timed out" not in str(e).lower():
                raise
            status = None
        if after_end is not None:
            after_end(container)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return status, out, err
    except Exception as e:  # APIError, or the engine went away (requests' errors)
        return 1, "", f"the helper container failed: {explain(e)}"
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:  # gone already, or the engine went away: reap finds it by label
                pass
        else:
            try:
                c.containers.get(name).remove(force=True)
            except Exception:  # never created
                pass


__all__ = ["client", "endpoint", "explain", "image_id", "run_helper", "sdk"]


def container_pids(container: Any) -> list[int]:
    """PIDs of a container's processes, as the engine's machine numbers them (``docker top``);
    empty when the container is gone."""
    try:
        top = container.top(ps_args="-eo pid")
    except Exception:
        return []
    try:
        col = top["Titles"].index("PID")
        return [int(p[col]) for p in top.get("Processes") or []]
    except (KeyError, ValueError):
        return []
