"""Abnormal ends, rank side: a record when an exception ends a process or a thread.

Installed by ``sitecustomize`` when ``EMULATOR_DIAG_DIR`` is set. Three hooks, none of which
costs anything until an exception escapes:

- ``sys.excepthook``: an exception nobody caught ends the process (exit status 1);
- ``threading.excepthook``: an exception ended a thread (the process may go on);
- ``multiprocessing``'s child bootstrap: a ``multiprocessing`` child (also ``torch.multiprocessing``
  spawn) ended with a non-zero exit code — multiprocessing catches the exception and prints it
  itself, so ``sys.excepthook`` never sees it.

A fatal signal, for the whole life of the process: at interpreter start, ``faulthandler`` is
enabled (all threads) into ``fatal-<hostname>-<pid>.txt`` in ``EMULATOR_DIAG_DIR`` (a one-line
header ``# sm-emulator-fatal pid=<pid> rank=<..> local=<..> start=<time> argv=<repr>``), never
into the job's stderr: what the job prints stays what it prints on SageMaker, where nothing
enables it. When SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL ends the process, the C handler
appends ``Fatal Python error: <signal>`` and every thread's Python stack, then re-raises the
signal, so the process still dies of it (its parent sees the same status). The file's mtime is
then the time of death (``emulator.diagnostics.firstdeath`` orders deaths by it). Cost at start:
one ``open``, one ``write`` and ``faulthandler.enable`` (five ``sigaction`` calls and an
alternate signal stack); no import beyond the built-in ``faulthandler``. Not done when
``faulthandler`` is already enabled at start (``PYTHONFAULTHANDLER``, ``-X faulthandler``): then
it stays as it was set. A script that enables it later (``faulthandler.enable()``, torch elastic's
``@record``) replaces the emulator's file, as it would replace stderr: its choice wins. A forked
child (DataLoader workers, ``multiprocessing``) opens its own file while the emulator's file is
still the handler's (``os.register_at_fork``). Not emulated, and one visible difference: a script
that asks ``faulthandler.is_enabled()`` gets True, where on SageMaker it gets False.

And one mark that is not an abnormal end: when the main script has ended (``threading._shutdown``,
which the interpreter calls after the last line, a ``sys.exit`` or an uncaught exception, once
non-daemon threads have ended, before ``atexit`` handlers and finalisation), the process writes
``ended-<hostname>-<pid>.txt`` (a JSON header line), unless the script enabled ``faulthandler``
itself. Where the whole-life handler above is not the emulator's file (it could not be opened),
``faulthandler`` is pointed at the ``ended-`` file instead. A fatal signal during interpreter exit
(gloo's teardown aborting, an ``os.abort()`` in an ``atexit`` handler) then leaves its Python
stacks in the ``fatal-`` (or ``ended-``) file after that mark, so the emulator can say that the
process died *after* the script's last line (``emulator.diagnostics.exitdeaths``). ``os._exit``
skips all of it, as it skips exit itself.

Each hook writes ``exit-<hostname>-<pid>-<n>.json`` (kind, exception type and first line of its text,
the innermost frame, the traceback's frames innermost first (``stack``, at most
:data:`STACK_FRAMES`), rank, local rank, argv, time) and then does exactly what the original hook did. The
emulator warns about these records when the job still ended ``Completed`` (``emulator.diagnostics.quiet``).
A traceback that a script prints and handles itself (``traceback.print_exc()``,
``logging.exception``) does not go through these hooks and is not recorded: on purpose.
"""

from __future__ import annotations

import os
import sys

# From ``_sm_emulator_names`` (importing ``_sm_emulator_protocol`` at every process start costs ~15 ms).
from _sm_emulator_names import ENDED_PREFIX, ENV_DIAG_DIR, ENV_DLC, ENV_DLC_GAPS, EXIT_PREFIX, FATAL_PREFIX

_COUNT = [0]
_ENDED: list[object] = []  # the open file faulthandler writes to (kept open until the process ends)
#: The emulator's whole-life ``faulthandler`` file (an unbuffered ``FileIO``, kept open until the
#: process ends) and its reference count while ``faulthandler`` holds it (see :func:`_fatal_is_ours`).
_FATAL: list[object] = []
_FATAL_REFS = [0]
#: At most this many frames of an exception's traceback are recorded (innermost first).
STACK_FRAMES = 30


def _where(tb: object) -> str:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return ""
    code = last.tb_frame.f_code
    return f"{code.co_filename}:{last.tb_lineno} in {code.co_name}"


def _stack(tb: object) -> list[str]:
    """``file:line in function`` of each traceback frame, innermost first (at most :data:`STACK_FRAMES`)."""
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code  # type: ignore[attr-defined]
        frames.append(f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}")  # type: ignore[attr-defined]
        tb = tb.tb_next  # type: ignore[attr-defined]
    return frames[::-1][:STACK_FRAMES]


def record(kind: str, exc: BaseException | None = None, tb: object = None, **extra: object) -> None:
    """Write one record (never raises)."""
    try:
        import json
        import time

        directory = os.environ.get(ENV_DIAG_DIR)
        if not directory:
            return
        _COUNT[0] += 1
        host = os.uname().nodename
        tb = tb if tb is not None else getattr(exc, "__traceback__", None)
        data = {
            "kind": kind, "host": host, "pid": os.getpid(), "ppid": os.getppid(), "time": time.time(),
            "rank": os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK"),
            "local_rank": os.environ.get("LOCAL_RANK") or os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"),
            "argv": list(getattr(sys, "argv", []))[:6],
            "exception": None if exc is None else type(exc).__name__,
            "message": None if exc is None else (str(exc).strip().splitlines() or [""])[0][:300],
            "where": _where(tb),
            "stack": _stack(tb),
            **extra,
        }  # fmt: skip
        path = os.path.join(directory, f"{EXIT_PREFIX}{host}-{os.getpid()}-{_COUNT[0]}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)
    except Exception:
        pass




def missing_module_hint(exc: BaseException) -> str | None:
    """The ``[emulator]`` line for a ``ModuleNotFoundError`` that ends a rank. Two cases: the DLC
    ships the package but the emulator does not install it here (``EMULATOR_DLC_GAPS``: CUDA-only
    builds, AWS binaries): the emulator's gap, the job would import it on SageMaker; otherwise the
    package is neither the DLC's (every package of it that installs here is installed) nor installed
    from the job's ``requirements.txt``, so the process fails on SageMaker the same way. None for
    anything else (a submodule missing from an installed package)."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, ModuleNotFoundError) or not name:
        return None
    top = name.split(".")[0]
    if top in sys.modules and top != name:  # a submodule of an installed package: not a package set matter
        return None
    import json

    dlc = os.environ.get(ENV_DLC) or "the PyTorch DLC"
    try:
        gaps = json.loads(os.environ.get(ENV_DLC_GAPS) or "{}")
    except ValueError:
        gaps = {}
    if top == "pkg_resources":
        return _pkg_resources_hint(dlc)
    if isinstance(gaps, dict) and top in gaps:
        there = ("whether it imports on SageMaker is not known" if "on SageMaker is not known" in str(gaps[top])
                 else "on SageMaker this import works")
        return (f"No module named {top!r}: {dlc} ships it, but the emulator cannot install it here "
                f"({gaps[top]}). This is the emulator's gap, not your job's: {there}.")
    return (f"No module named {top!r}: {dlc} does not ship it, and the job's requirements.txt did not install "
            f"it. On SageMaker this job fails here too: list the package that provides {top!r} in "
            "requirements.txt next to the entry point (the toolkit installs it before the script starts).")


#: setuptools 82.0.0 (uploaded to PyPI 2026-02-08) is the first release without ``pkg_resources``
#: (setuptools' changelog, "v82.0.0": pkg_resources removed).
SETUPTOOLS_WITHOUT_PKG_RESOURCES = 82


def _pkg_resources_hint(dlc: str) -> str:
    """``pkg_resources`` is setuptools', not a distribution of its own. AWS's Dockerfiles install
    setuptools unpinned or with a lower bound only (2.8: ``setuptools>=75.0.0``); the emulator resolves it
    as of the image's date, as a build of that day did. Whether the image SageMaker runs today was
    built before setuptools 82 is not known, so the hint never says the job fails there."""
    try:
        from importlib import metadata

        version = metadata.version("setuptools")
    except Exception:
        version = None
    if version is None:
        here = "no setuptools is installed in this job"
    else:
        major = version.split(".")[0]
        newer = major.isdigit() and int(major) >= SETUPTOOLS_WITHOUT_PKG_RESOURCES
        here = (f"this job's setuptools is {version}" + (
            f" (resolved as of {dlc}'s date, as AWS's unpinned setuptools line was; setuptools "
            f"{SETUPTOOLS_WITHOUT_PKG_RESOURCES}.0.0 removed pkg_resources)" if newer else ""))
    return (f"No module named 'pkg_resources': {here}. Whether the image SageMaker runs has a setuptools "
            f"with pkg_resources is not known (a build after 2026-02-08 has none). A requirements.txt line "
            f"'setuptools<{SETUPTOOLS_WITHOUT_PKG_RESOURCES}' gives it back, here and on SageMaker.")


def _excepthook(original: object) -> object:
    def hook(exc_type: object, exc: BaseException, tb: object) -> None:
        record("uncaught", exc, tb)
        original(exc_type, exc, tb)
        hint = missing_module_hint(exc)
        if hint is not None:
            try:
                from _sm_emulator_log import log

                log(hint)
            except Exception:
                pass

    hook._sm_emulator_exits = True  # type: ignore[attr-defined]
    return hook


def _fatal_is_ours() -> bool:
    """True while ``faulthandler`` is enabled into the emulator's ``fatal-`` file. ``faulthandler``
    holds a reference to the file object it writes to and drops it when the script enables it
    elsewhere or disables it: the reference count says which (no way to ask it for its file)."""
    import faulthandler

    return bool(_FATAL) and faulthandler.is_enabled() and sys.getrefcount(_FATAL[0]) >= _FATAL_REFS[0]


def enable_fatal() -> None:
    """Enable ``faulthandler`` into ``fatal-<host>-<pid>.txt`` for the rest of this process's life
    (module docstring); never raises. In a forked child: a file of its own, if the parent's
    handler was still the emulator's."""
    try:
        import faulthandler

        directory = os.environ.get(ENV_DIAG_DIR)
        if not directory or (faulthandler.is_enabled() and not _fatal_is_ours()):
            return  # enabled by the interpreter's options or the script: left as it is
        import time

        pid = os.getpid()
        env = os.environ
        rank = env.get("RANK") or env.get("OMPI_COMM_WORLD_RANK") or "-"
        local = env.get("LOCAL_RANK") or env.get("OMPI_COMM_WORLD_LOCAL_RANK") or "-"
        f = open(os.path.join(directory, f"{FATAL_PREFIX}{os.uname().nodename}-{pid}.txt"), "wb", buffering=0)  # noqa: SIM115
        f.write(f"# sm-emulator-fatal pid={pid} rank={rank} local={local} start={time.time():.3f} "
                f"argv={list(getattr(sys, 'argv', []))[:6]!r}\n".encode(errors="backslashreplace"))
        faulthandler.enable(file=f, all_threads=True)
        old = _FATAL[:]
        _FATAL[:] = [f]
        del f
        _FATAL_REFS[0] = sys.getrefcount(_FATAL[0])
        for previous in old:  # the parent's file, inherited through fork
            previous.close()  # type: ignore[attr-defined]
    except Exception:
        pass


def mark_ended() -> None:
    """Write the ``ended-`` header; point ``faulthandler`` at that file when no handler is set (never raises)."""
    try:
        import faulthandler
        import json
        import time

        directory = os.environ.get(ENV_DIAG_DIR)
        ours = _fatal_is_ours()
        if not directory or _ENDED or (faulthandler.is_enabled() and not ours):
            return
        host = os.uname().nodename
        f = open(os.path.join(directory, f"{ENDED_PREFIX}{host}-{os.getpid()}.txt"), "w")  # noqa: SIM115
        json.dump({"host": host, "pid": os.getpid(), "time": time.time(),
                   "rank": os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK"),
                   "argv": list(getattr(sys, "argv", []))[:6]}, f)
        f.write("\n")
        f.flush()
        _ENDED.append(f)
        if not ours:  # the whole-life handler is not there: catch a death at exit here
            faulthandler.enable(file=f, all_threads=True)
    except Exception:
        pass


def _on_threading(threading: object) -> None:
    """Wrap ``threading._shutdown``, a private function (registry entry of group ``exit-records``),
    and set ``threading.excepthook``, Python's documented hook for uncaught thread exceptions (as
    ``sys.excepthook``: hooks made to be replaced are set directly, not registered patches)."""
    if getattr(threading.excepthook, "_sm_emulator_exits", False):
        return
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None and not getattr(shutdown, "_sm_emulator_exits", False):
        from _sm_emulator_patches import wrap

        wrap("exit-records", threading, "_shutdown", _shutdown_wrapper)
    threading.excepthook = _thread_hook_wrapper(threading.excepthook)  # type: ignore[attr-defined]


def _shutdown_wrapper(shutdown: object) -> object:
    def _shutdown() -> None:
        try:
            shutdown()  # type: ignore[operator]
        finally:
            mark_ended()

    _shutdown._sm_emulator_exits = True  # type: ignore[attr-defined]
    return _shutdown


def _thread_hook_wrapper(original: object) -> object:
    def hook(args: object) -> None:
        if args.exc_type is not SystemExit:  # type: ignore[attr-defined]
            record("thread", args.exc_value, args.exc_traceback,  # type: ignore[attr-defined]
                   thread=getattr(args.thread, "name", None))  # type: ignore[attr-defined]
        original(args)  # type: ignore[operator]

    hook._sm_emulator_exits = True  # type: ignore[attr-defined]
    return hook


def _on_multiprocessing(process: object) -> None:
    """Wrap ``BaseProcess._bootstrap`` (registry entry of group ``exit-records``; the registry is
    imported only here, where ``multiprocessing`` is in use, not at every process start)."""
    if getattr(process.BaseProcess._bootstrap, "_sm_emulator_exits", False):
        return
    from _sm_emulator_patches import wrap

    wrap("exit-records", process, "BaseProcess._bootstrap", _bootstrap_wrapper)


def _bootstrap_wrapper(original: object) -> object:
    def _bootstrap(self: object, *args: object, **kwargs: object) -> object:
        caught: list[BaseException] = []
        run = self.run

        def recording_run() -> object:  # keeps the exception multiprocessing will print and drop
            try:
                return run()
            except BaseException as exc:
                caught.append(exc)
                raise

        self.run = recording_run
        code = original(self, *args, **kwargs)  # type: ignore[operator]
        if code:
            exc = caught[-1] if caught else None
            record("child-exit", exc, None, code=code, process=getattr(self, "name", None))
        return code

    _bootstrap._sm_emulator_exits = True  # type: ignore[attr-defined]
    return _bootstrap


def install() -> None:
    """Enable the whole-life ``faulthandler`` (here and in forked children) and wrap the hooks (the
    original behaviour is kept: each wrapper calls the original)."""
    if not os.environ.get(ENV_DIAG_DIR):
        return
    enable_fatal()
    os.register_at_fork(after_in_child=enable_fatal)
    from _sm_emulator_importhook import when_imported

    if not getattr(sys.excepthook, "_sm_emulator_exits", False):
        sys.excepthook = _excepthook(sys.excepthook)
    when_imported("threading", _on_threading)
    when_imported("multiprocessing.process", _on_multiprocessing)
