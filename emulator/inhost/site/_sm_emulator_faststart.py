"""Fast rank start (optional, OFF by default): a per-host "zygote" that forks pre-imported ranks.

Switched on by ``EMULATOR_FAST_START=1`` in the job's environment (``emulator.run(...,
environment={"EMULATOR_FAST_START": "1"})``) together with one hook in ``sitecustomize``::

    if os.environ.get("EMULATOR_INHOST") == "1" and os.environ.get("EMULATOR_FAST_START") == "1":
        import _sm_emulator_faststart
        _sm_emulator_faststart.activate()

How it works. The host's ``train`` process (PID 1, the real toolkit) starts a zygote in the
background as its first act: a Python interpreter that imports ``EMULATOR_FAST_START_PRELOAD``
(default ``torch,torch.distributed``; e.g. add ``pytorch_lightning``) once, then listens on a
Unix socket in the host's private ``/tmp``. The real toolkit still runs and still launches the
real ``torchrun`` with its real command line; when that ``torchrun`` process, and each rank it
starts (``python -u script.py`` with ``TORCHELASTIC_RUN_ID`` set), reaches ``sitecustomize``,
it hands its stdin/stdout/stderr, argv, environment and working directory to the zygote, which
forks a child that becomes that program (``runpy``, ``__name__ == "__main__"``). The original
process stays as a thin stand-in: it forwards signals to the child and exits with the child's
exit status (or dies of the same signal); if it is killed, the zygote kills the child.

Only where every process would have the same ``str`` hash seed. A fresh interpreter picks a random
secret for ``hash()`` of strings at start unless ``PYTHONHASHSEED`` fixes it, so on SageMaker each
rank has its own, and iterating a set of names can give each rank its own order (a classic cause of
mismatched collectives). The secret cannot change after start, so a forked rank would share its
zygote's with every other rank of the host and hide that bug. So the zygote starts only where the
host's ``PYTHONHASHSEED`` is a fixed number (:func:`fixed_hash_seed`; the job's ``environment`` sets
it), and forks only a process whose own value is the same: then a fresh start would have had that
very seed. Elsewhere every process starts normally, and the host log says why once.

Fidelity limits besides (why it is off by default):

* the preloaded modules were imported with the zygote's environment: settings read at import
  time (``TORCH_*``/``OMP_*`` flags read on ``import torch``, the in-host patches' import-time
  decisions) come from the host's environment at ``train`` start, not the rank's;
* a rank's PID is not the PID ``torchrun`` started, and its parent is the zygote, not
  ``torchrun`` (``os.getppid()`` differs; ``/proc`` shows one extra small process per rank);
* ``random`` and ``numpy.random`` are reseeded after the fork (as a fresh process would be);
  other state initialised at import (e.g. torch's default generator, which is fixed anyway) is
  shared;
* only ``torchrun`` and its ranks are delegated: MPI ranks (``mpirun``/``smddprun``), ``python -c``
  and anything with other interpreter options start normally;
* if the zygote is not ready or fails, processes start normally (no error).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

from _sm_emulator_names import ENV_FAST_START, ENV_FAST_START_PRELOAD

SOCK = "/tmp/.sm-emulator-zygote.sock"
PIDFILE = "/tmp/.sm-emulator-zygote.pid"
LOG = "/tmp/.sm-emulator-zygote.log"
ROLE = "_SM_EMULATOR_ZYGOTE"
#: How long a process waits for a zygote that is still importing before starting normally.
READY_TIMEOUT = 120.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _cmdline() -> list[str]:
    with open("/proc/self/cmdline", "rb") as f:
        return [a.decode(errors="surrogateescape") for a in f.read().split(b"\0")[:-1]]


def _parse(argv: list[str]) -> tuple[str, str, list[str], bool] | None:
    """``python [-u] script args`` / ``python [-u] -m mod args`` → (kind, target, argv, -u)."""
    unbuffered, i = False, 1
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-u":
            unbuffered = True
        elif argv[i] == "-m" and i + 1 < len(argv):
            return "module", argv[i + 1], [argv[i + 1], *argv[i + 2:]], unbuffered
        else:
            return None
        i += 1
    if i >= len(argv):
        return None
    return "script", argv[i], argv[i:], unbuffered


def fixed_hash_seed(value: str | None) -> bool:
    """Whether ``PYTHONHASHSEED=value`` fixes the ``str`` hash seed (a decimal 0 to 4294967295, as
    CPython accepts it); unset, empty and ``random`` mean a random seed per process."""
    return value is not None and value.isdigit() and int(value) <= 4294967295


#: The host log's line where fast start was asked for and no process is forked (module docstring).
NO_FIXED_SEED = ("[emulator] fast start: every process starts normally: PYTHONHASHSEED is not a fixed number, so "
                 "each rank has its own str hash seed, which forked ranks would share (set PYTHONHASHSEED in the "
                 "job's environment to fork them)\n")


def activate() -> None:
    """Called from ``sitecustomize``: start the zygote (host PID 1) or delegate to it."""
    if os.environ.get(ROLE) or os.environ.get(ENV_FAST_START) != "1":
        return
    try:
        argv = _cmdline()
        parsed = _parse(argv)
        if parsed is None:
            return
        kind, target, args, unbuffered = parsed
        name = os.path.basename(target)
        seeded = fixed_hash_seed(os.environ.get("PYTHONHASHSEED"))
        if os.getpid() == 1 and name == "train":
            if seeded:
                _spawn_zygote()
            else:
                sys.stderr.write(NO_FIXED_SEED)
        elif seeded and kind == "script" and (name == "torchrun" or os.environ.get("TORCHELASTIC_RUN_ID")):
            _delegate(kind, os.path.abspath(target), args, unbuffered)
    except Exception as exc:  # never break a process start: fall back to the normal start
        sys.stderr.write(f"[emulator] fast start unavailable ({type(exc).__name__}: {exc}); starting normally\n")


def _spawn_zygote() -> None:
    import subprocess

    with open(LOG, "ab") as log:
        zygote = subprocess.Popen([sys.executable, "-c", "import _sm_emulator_faststart as z; z.serve()"],
                                  env={**os.environ, ROLE: "1"}, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    # Alive from now on for every process that checks (not only once its interpreter is up): a rank
    # started before that would otherwise find no zygote and start normally.
    _write_pid(zygote.pid)


def _write_pid(pid: int) -> None:
    with open(PIDFILE + ".tmp", "w") as f:
        f.write(f"{pid}\n")
    os.rename(PIDFILE + ".tmp", PIDFILE)  # whole or absent for a reader


# -- wire format: 4-byte length + JSON; the first chunk of a request carries the fds ----------

def _send(sock: socket.socket, obj: object, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], fds)
    else:
        sock.sendall(frame)


def _recv(sock: socket.socket, with_fds: bool = False) -> tuple[object, list[int]]:
    fds: list[int] = []
    if with_fds:
        buf, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 8)
    else:
        buf = sock.recv(1 << 16)
    if not buf:
        raise EOFError
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("!I", buf[:4])[0]:
        more = sock.recv(1 << 20)
        if not more:
            raise EOFError
        buf += more
    (size,) = struct.unpack("!I", buf[:4])
    return json.loads(buf[4:4 + size]), fds


# -- the stand-in ------------------------------------------------------------------------------

def _zygote_alive() -> bool:
    try:
        with open(PIDFILE) as f:
            os.kill(int(f.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def _delegate(kind: str, target: str, args: list[str], unbuffered: bool) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not os.path.exists(SOCK):
        if not _zygote_alive() or time.monotonic() > deadline:
            return
        time.sleep(0.05)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(SOCK)
    except OSError:
        return
    _send(sock, {"kind": kind, "target": target, "argv": args, "unbuffered": unbuffered,
                 "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
    reply, _ = _recv(sock)
    if reply.get("pid") is None:  # type: ignore[union-attr]  # refused (another hash seed): start normally
        sock.close()
        return
    child = int(reply["pid"])  # type: ignore[index]
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    status, _ = _recv(sock)
    if status.get("signal"):  # type: ignore[union-attr]
        sig = int(status["signal"])  # type: ignore[index]
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(int(status.get("code", 1)))  # type: ignore[union-attr]


# -- the zygote --------------------------------------------------------------------------------

def serve() -> None:
    """The zygote's main loop: preload, listen, fork one child per request, report exits."""
    import gc
    import importlib
    import selectors

    _write_pid(os.getpid())
    base_pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    seed = os.environ.get("PYTHONHASHSEED")  # fixed (activate starts no zygote otherwise): this interpreter's
    t0 = time.time()
    for mod in filter(None, os.environ.get(ENV_FAST_START_PRELOAD, "torch,torch.distributed").split(",")):
        try:
            importlib.import_module(mod.strip())
        except Exception as exc:
            print(f"[zygote] preload {mod} failed: {exc}", flush=True)
    gc.collect()
    gc.freeze()
    print(f"[zygote] preloaded in {time.time() - t0:.2f} s", flush=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(SOCK + ".tmp")
    server.listen(64)
    os.rename(SOCK + ".tmp", SOCK)  # ready
    me = os.getpid()
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    try:
        while True:
            for key, _ in sel.select(0.05):
                if key.fileobj is server:
                    conn, _ = server.accept()
                    request, fds = _recv(conn, with_fds=True)
                    if request["env"].get("PYTHONHASHSEED") != seed:  # its fresh start's seed is not ours
                        for fd in fds:
                            os.close(fd)
                        _send(conn, {"pid": None})
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:
                        sel.close()
                        server.close()
                        for c in children.values():
                            c.close()
                        conn.close()
                        _become(request, fds, base_pythonpath)  # never returns
                    for fd in fds:
                        os.close(fd)
                    children[pid] = conn
                    sel.register(conn, selectors.EVENT_READ, pid)
                    _send(conn, {"pid": pid})
                else:  # the stand-in went away: its child goes too
                    try:
                        os.kill(key.data, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    sel.unregister(key.fileobj)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is None:
                    continue
                report = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                          else {"code": os.waitstatus_to_exitcode(status)})
                try:
                    _send(conn, report)
                except OSError:
                    pass
                try:
                    sel.unregister(conn)
                except (KeyError, ValueError):
                    pass
                conn.close()
    finally:
        if os.getpid() == me:
            for path in (SOCK, PIDFILE):
                try:
                    os.unlink(path)
                except OSError:
                    pass


def _become(request: dict, fds: list[int], base_pythonpath: list[str]) -> None:  # type: ignore[type-arg]
    """In the forked child: take over the stand-in's stdio, argv, env and cwd, and run it."""
    import io
    import random
    import runpy

    code = 1
    try:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for i, fd in enumerate(fds[:3]):
            os.dup2(fd, i)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ROLE, None)
        os.chdir(request["cwd"])
        unbuffered = bool(request["unbuffered"]) or bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), errors="surrogateescape")  # noqa: SIM115
        sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),  # noqa: SIM115
                                      errors="surrogateescape", write_through=unbuffered)
        sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
                                      errors="backslashreplace", write_through=True)
        new_pp = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        rest = [p for p in sys.path if p and p not in base_pythonpath and p not in new_pp]
        head = os.path.dirname(request["target"]) if request["kind"] == "script" else os.getcwd()
        sys.path[:] = [head, *new_pp, *rest]
        sys.argv = list(request["argv"])
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if request["kind"] == "script":
            runpy.run_path(request["target"], run_name="__main__")
        else:
            runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.exit(code)  # normal interpreter exit: atexit handlers and stdio flush run
