"""How the docker backend gets files into and out of its containers: bind mounts, or copies.

A bind mount names a path of *the engine's* filesystem. That is this machine's only when the
engine runs here and shares its filesystem; with docker-outside-of-docker (a CI job container
with the engine's socket mounted), ``docker:dind`` reached over TCP (``DOCKER_HOST``) or colima
(which shares only ``$HOME``), the path is missing there (``bind source path does not exist``) or
silently empty. So, as testcontainers does (testcontainers-java PR #7652, testcontainers-go PR
#1907, testcontainers-python's ``put_archive``), files are **copied** through the engine's API:

* before a host starts, every mount's source (the host's ``/opt/ml`` tree, channels, a checkpoint
  folder, the wheelhouse, the in-host folder, an empty diagnostics folder) is put into the created,
  not yet started container (``PUT /containers/{id}/archive``), owned by root as on SageMaker;
* ``/etc/hosts`` cannot be copied (the engine writes its own at start), so every ``algo-N`` is
  given to the engine as an extra host (``--add-host``): the same names and addresses, plus the
  engine's own ``localhost``/``ip6-*`` lines and the container's own line;
* while hosts run, their diagnostics folder is pulled every :data:`DIAG_SYNC_INTERVAL` seconds
  (the emulator's rendezvous watch reads it live);
* when the job ends (completed, failed, stopped, timed out, Ctrl-C, SIGTERM: whatever leads to
  teardown), every writable mount's target (``/opt/ml``, an outside checkpoint folder, the
  diagnostics) is taken out of the stopped container (``GET /containers/{id}/archive``) into the
  same folder of this machine a bind mount would have written, before the container is removed.
  Read-only mounts nested in them (channels) are not copied back.

Bind mounts stay as an optimisation, used only after :func:`probe_bind` proved the engine sees this
machine's folders (a random sentinel file written here is read back by a tiny container, and a
read-only folder shows the same entries); the verdict is cached per engine and folder for the
life of this process. ``EMULATOR_DOCKER_FILES=copy`` (or ``bind``) forces a mode; the launch spec
records the mode (``options.files``) and why (``options.files_reason``).

Not emulated in copy mode: read-only mounts (channels, the in-host folder, the wheelhouse) are
writable copies (root ignores mode bits, so nothing enforces read-only); files deleted in a
container are not deleted here (a copy back adds and overwrites); a host killed with ``kill -9`` of
the emulator loses what it wrote (``reap`` removes its container). Container logs never needed a
shared filesystem: they stream through the API as in bind mode.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ...errors import BackendUnavailable
from ...inhost import protocol as P
from ..base import HostLaunch, LaunchSpec, Mount
from .names import DEFAULT_IMAGE, LABEL_HELPER

#: Environment variable that forces how files reach the containers: ``copy``, ``bind``, or
#: ``auto`` (the default: bind when the sentinel check passes, else copy).
FILES_ENV = P.ENV_PREFIX + "DOCKER_FILES"  # EMULATOR_DOCKER_FILES (caller side; never set in hosts)
MODES = ("auto", "copy", "bind")
COPY, BIND = "copy", "bind"
DIAG_SYNC_INTERVAL = 1.0
SENTINEL_PREFIX = ".sm-emulator-bind-probe-"
PROBE_MOUNT = "/sm-emulator-probe"
#: How many entries of a read-only folder the sentinel check compares.
LISTING_LIMIT = 64

#: (engine ID, folder) -> whether the engine sees the folder as this machine does.
_SEEN: dict[tuple[str, str], bool] = {}
_SEEN_LOCK = threading.Lock()


def requested_mode(env: Mapping[str, str] | None = None) -> str:
    """The mode asked through :data:`FILES_ENV` (``auto`` when unset). Raises
    :class:`BackendUnavailable` for a value that is not one of :data:`MODES`."""
    value = (os.environ if env is None else env).get(FILES_ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise BackendUnavailable(f"{FILES_ENV}={value!r} is not a files mode of the docker backend; "
                                 f"allowed: {', '.join(MODES)}")
    return value


def anchor(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (folders of a job are made after its spec)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p if p.is_dir() else p.parent


def spec_files(spec: LaunchSpec) -> str:
    """The spec's files mode; a spec made without one (by hand) binds unless
    ``EMULATOR_DOCKER_FILES=copy`` forces copies."""
    mode = spec.options.get("files")
    if mode in (COPY, BIND):
        return str(mode)
    return COPY if requested_mode() == COPY else BIND


def files_mode(client: Any, image: str | None, labels: Mapping[str, str],
               mounts: Iterable[Mount]) -> tuple[str, str]:
    """How a job's files reach its containers (:func:`choose_mode`); probed with the job's image
    ``image``, or the emulator image while the job's is not built yet."""

    probe_image = image
    if probe_image is None:
        try:
            client.images.get(DEFAULT_IMAGE)
            probe_image = DEFAULT_IMAGE
        except Exception:
            if requested_mode() == "auto":
                return COPY, "no image to run the sentinel check with yet; files are copied"
    return choose_mode(client, probe_image or DEFAULT_IMAGE, mounts, labels)


def choose_mode(client: Any, image: str, mounts: Iterable[Mount], labels: Mapping[str, str]) -> tuple[str, str]:
    """``(mode, reason)`` for a job whose hosts mount ``mounts``: the forced mode, else ``bind``
    when the engine sees every mount's folder (:func:`probe_bind`), else ``copy``."""
    asked = requested_mode()
    if asked != "auto":
        return asked, f"{FILES_ENV}={asked}"
    mounts = list(mounts)
    folders = sorted({anchor(m.source) for m in mounts}, key=str)
    writable = {anchor(m.source) for m in mounts if not m.read_only}
    unseen = probe_bind(client, image, folders, labels, writable=writable)
    if unseen:
        return COPY, (f"the engine does not see {unseen[0]} as this machine does (sentinel check); "
                      "files are copied through the engine's API")
    return BIND, "the engine sees this machine's folders (sentinel check)"


def probe_bind(client: Any, image: str, folders: Sequence[Path], labels: Mapping[str, str], *,
               writable: Set[Path] = frozenset()) -> list[Path]:
    """The folders of ``folders`` the engine does not see as this machine does (empty: bind mounts
    work). One tiny container bind-mounts every folder not yet known: a folder of ``writable`` (the
    job's own: its tree, scratch; never a user's channel) gets a random sentinel file that the
    container must read back; another must list the same entries."""
    engine = _engine_id(client)
    with _SEEN_LOCK:
        unknown = [f for f in folders if (engine, str(f)) not in _SEEN]
    if unknown:
        seen = _run_probe(client, image, unknown, labels, writable)
        with _SEEN_LOCK:
            for f in unknown:
                _SEEN[(engine, str(f))] = seen.get(f, False)
    with _SEEN_LOCK:
        return [f for f in folders if not _SEEN[(engine, str(f))]]


def _engine_id(client: Any) -> str:
    try:
        return str(client.info().get("ID") or client.api.base_url)
    except Exception:
        return str(client.api.base_url)


def _listing(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))[:LISTING_LIMIT]
    except OSError:
        return []


def _run_probe(client: Any, image: str, folders: Sequence[Path], labels: Mapping[str, str],
               writable: Set[Path]) -> dict[Path, bool]:
    from . import engine

    sentinels: dict[Path, tuple[Path, str]] = {}
    for f in folders:
        if f in writable and os.access(f, os.W_OK):
            token = secrets.token_hex(16)
            path = f / f"{SENTINEL_PREFIX}{token}"
            try:
                path.write_text(token)
            except OSError:
                continue
            sentinels[f] = (path, token)
    script = []
    for i, f in enumerate(folders):
        target = f"{PROBE_MOUNT}/{i}"
        if f in sentinels:
            script.append(f"echo \"{i} $(cat {target}/{sentinels[f][0].name} 2>/dev/null)\"")
        else:
            script.append(f"echo \"{i} $(ls -A {target} 2>/dev/null | LC_ALL=C sort | head -n {LISTING_LIMIT} "
                          "| tr '\\n' '/')\"")
    dmount = engine.sdk(".types").Mount
    mounts = [dmount(f"{PROBE_MOUNT}/{i}", str(f), type="bind", read_only=f not in sentinels)
              for i, f in enumerate(folders)]
    out = ""
    container = None
    try:
        container = client.containers.create(
            image, entrypoint=["sh", "-c", "\n".join(script)], command=[], mounts=mounts, network_mode="none",
            user="0", labels={**labels, LABEL_HELPER: "bind-probe"})
        container.start()
        container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
    except Exception:
        out = ""  # e.g. "bind source path does not exist": the engine does not see them
    finally:
        if container is not None:
            try:
                container.remove(force=True)
            except Exception:
                pass
        for path, _ in sentinels.values():
            path.unlink(missing_ok=True)
    got = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        got[key] = value
    seen = {}
    for i, f in enumerate(folders):
        answer = got.get(str(i))
        if answer is None:
            seen[f] = False
        elif f in sentinels:
            seen[f] = answer.strip() == sentinels[f][1]
        else:
            listing = [e for e in _listing(f) if not e.startswith(SENTINEL_PREFIX)]
            theirs = [e for e in answer.split("/") if e and not e.startswith(SENTINEL_PREFIX)]
            seen[f] = sorted(theirs) == sorted(listing)
    return seen


# ---- copy mode ------------------------------------------------------------------------------


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _add_parents(tar: tarfile.TarFile, target: str, added: set[str]) -> None:
    parts = PurePosixPath(target.lstrip("/")).parts[:-1]
    for k in range(1, len(parts) + 1):
        name = "/".join(parts[:k])
        if name in added:
            continue
        added.add(name)
        d = tarfile.TarInfo(name)
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(_root_owned(d))


def inputs_archive(mounts: Iterable[Mount], fileobj: IO[bytes] | None = None) -> bytes:
    """A tar, to extract at ``/``, that holds every mount's source at its target (symlinks
    followed, as a bind mount shows what they point at; everything owned by root). Written to
    ``fileobj`` when given (then returns ``b""``), else returned."""
    buf = io.BytesIO() if fileobj is None else fileobj
    added: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", dereference=True) as tar:
        for m in mounts:
            if not m.source.exists():  # as a bind mount of it would fail
                raise BackendUnavailable(f"cannot copy {m.source} to {m.target} of the host: it does not exist")
            _add_parents(tar, m.target, added)
            tar.add(str(m.source), arcname=m.target.lstrip("/"), filter=_root_owned)
    return buf.getvalue() if isinstance(buf, io.BytesIO) else b""


def put_inputs(container: Any, mounts: Sequence[Mount]) -> None:
    """Copy a host's ``mounts`` (but ``/etc/hosts``, see :func:`extra_hosts`) into its created container."""
    with tempfile.TemporaryFile() as spool:  # channels may be large: stream the tar from disk
        inputs_archive([m for m in mounts if m.target != "/etc/hosts"], spool)
        spool.seek(0)
        container.put_archive("/", spool)


def extra_hosts(host: HostLaunch) -> dict[str, str]:
    """What ``/etc/hosts`` (the spec's file) says of each name, for the engine's ``--add-host``."""
    found: dict[str, str] = {}
    for line in host.hosts_file.splitlines():
        fields = line.split()
        if len(fields) >= 2 and not fields[0].startswith("#") and fields[0] != "::1":
            for name in fields[1:]:
                if name != "localhost":
                    found.setdefault(name, fields[0])
    return found


def _nested(target: str, inside: str) -> str | None:
    """``target`` relative to ``inside`` when it lies below it, else None."""
    t, i = PurePosixPath(target), PurePosixPath(inside)
    return t.relative_to(i).as_posix() if t != i and i in t.parents else None


def _members(tar: tarfile.TarFile, top: str, skip: Sequence[str]) -> Iterator[tarfile.TarInfo]:
    """The members of an archive of folder ``top`` renamed relative to it, without ``skip`` subtrees."""
    for info in tar:
        parts = PurePosixPath(info.name).parts
        if not parts or parts[0] != top:
            continue
        rel = "/".join(parts[1:])
        if not rel or any(rel == s or rel.startswith(s + "/") for s in skip):
            continue
        info.name = rel
        yield info


def get_outputs(container: Any, mounts: Sequence[Mount]) -> list[str]:
    """Copy every writable mount's target out of ``container`` into its source folder here, as a
    bind mount would have left it (read-only mounts nested in it are skipped; files keep their
    mode, are owned by whoever runs this). Returns problems (empty: all copied)."""
    problems = []
    read_only = [m.target for m in mounts if m.read_only]
    for m in mounts:
        if m.read_only:
            continue
        skip = [rel for rel in (_nested(t, m.target) for t in read_only) if rel]
        try:
            stream, _ = container.get_archive(m.target)
            extract(stream, m.source, PurePosixPath(m.target).name, skip)
        except Exception as e:  # e.g. the folder is gone: nothing to copy
            problems.append(f"{m.target}: {e.__class__.__name__}: {e}")
    return problems


def extract(stream: Iterable[bytes], dest: Path, top: str, skip: Sequence[str] = ()) -> None:
    """Extract an engine's archive of folder ``top`` into ``dest``: folders, regular files (mode
    kept without setuid/setgid/sticky) and symlinks that stay inside ``dest``; nothing lands outside
    ``dest``; devices, hard links and links out are skipped. Written by hand rather than with
    tarfile's ``data`` filter, which Python before 3.11.4 (e.g. Debian bookworm's) lacks."""
    dest.mkdir(parents=True, exist_ok=True)
    root = os.path.realpath(dest)
    with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
        for info in _members(tar, top, skip):
            joined = os.path.join(root, info.name)
            target = os.path.join(os.path.realpath(os.path.dirname(joined)), os.path.basename(joined))
            if os.path.commonpath([root, target]) != root or target == root or info.name.endswith(".."):
                continue
            try:
                _write_member(tar, info, Path(target), root)
            except OSError:
                continue


def _write_member(tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path, root: str) -> None:
    if info.isdir():
        target.mkdir(parents=True, exist_ok=True)
        target.chmod((info.mode & 0o777) | 0o700)
    elif info.isfile():
        source = tar.extractfile(info)
        if source is None:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.is_dir():
            return
        with open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        target.chmod(info.mode & 0o777)
    elif info.issym():
        pointed = os.path.realpath(os.path.join(os.path.dirname(target), info.linkname))
        if os.path.isabs(info.linkname) or os.path.commonpath([root, pointed]) != root:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        if not target.exists():
            target.symlink_to(info.linkname)


class _Chunks(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the engine's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._rest:
            try:
                self._rest = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._rest))
        b[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n


class DiagSync:
    """Pulls the hosts' diagnostics folder into this machine's while they run (copy mode)."""

    def __init__(self, containers: Mapping[str, Any], dest: Path) -> None:
        self._containers = dict(containers)
        self._dest = dest
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docker-diag-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(DIAG_SYNC_INTERVAL):
            self.pull()

    def pull(self) -> None:
        for c in self._containers.values():
            try:
                stream, _ = c.get_archive(P.DIAG_DIR)
                extract(stream, self._dest, PurePosixPath(P.DIAG_DIR).name)
            except Exception:
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


def hand_back(folders: Iterable[Path], owner: tuple[int, int]) -> None:
    """Give the copied-back ``folders`` to ``owner`` when this process runs as root (otherwise the
    copies are already this process's user's). Best effort, as the bind mode's ``chown``."""
    if os.geteuid() != 0 or owner == (0, 0):
        return
    for folder in folders:
        if not folder.is_dir():
            continue
        for root, dirs, files in os.walk(folder):
            for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
                try:
                    os.chown(name, *owner, follow_symlinks=False)
                except OSError:
                    continue
