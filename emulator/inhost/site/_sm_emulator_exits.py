"""Abnormal ends, rank side: a record when an exception ends a process or a thread.

Installed by ``sitecustomize`` when ``EMULATOR_DIAG_DIR`` is set. Three hooks, none of which
costs anything until an exception escapes:

- ``sys.excepthook``: an exception nobody caught ends the process (exit status 1);
- ``threading.excepthook``: an exception ended a thread (the process may go on);
- ``multiprocessing``'s child bootstrap: a ``multiprocessing`` child (also ``torch.multiprocessing``
  spawn) ended with a non-zero exit code — multiprocessing catches the exception and prints it
  itself, so ``sys.excepthook`` never sees it.

And one mark that is not an abnormal end: when the main script has ended (``threading._shutdown``,
which the interpreter calls after the last line, a ``sys.exit`` or an uncaught exception, once
non-daemon threads have ended, before ``atexit`` handlers and finalisation), the process writes
``ended-<hostname>-<pid>.txt`` (a JSON header line) and points ``faulthandler`` at it, unless the
script enabled ``faulthandler`` itself. A fatal signal during interpreter exit (gloo's teardown
aborting, an ``os.abort()`` in an ``atexit`` handler) then leaves its Python stacks there, so the
emulator can say that the process died *after* the script's last line (``emulator.diagnostics.exitdeaths``).
``os._exit`` skips all of it, as it skips exit itself.

Each hook writes ``exit-<hostname>-<pid>-<n>.json`` (kind, exception type and first line of its text,
the innermost frame, rank, argv, time) and then does exactly what the original hook did. The
emulator warns about these records when the job still ended ``Completed`` (``emulator.diagnostics.quiet``).
A traceback that a script prints and handles itself (``traceback.print_exc()``,
``logging.exception``) does not go through these hooks and is not recorded: on purpose.
"""

from __future__ import annotations

import os
import sys

# From ``_sm_emulator_names`` (importing ``_sm_emulator_protocol`` at every process start costs ~15 ms).
from _sm_emulator_names import ENDED_PREFIX, ENV_DIAG_DIR, ENV_DLC, ENV_DLC_GAPS, EXIT_PREFIX

_COUNT = [0]
_ENDED: list[object] = []  # the open file faulthandler writes to (kept open until the process ends)


def _where(tb: object) -> str:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return ""
    code = last.tb_frame.f_code
    return f"{code.co_filename}:{last.tb_lineno} in {code.co_name}"


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
        data = {
            "kind": kind, "host": host, "pid": os.getpid(), "ppid": os.getppid(), "time": time.time(),
            "rank": os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK"),
            "argv": list(getattr(sys, "argv", []))[:6],
            "exception": None if exc is None else type(exc).__name__,
            "message": None if exc is None else (str(exc).strip().splitlines() or [""])[0][:300],
            "where": _where(tb if tb is not None else getattr(exc, "__traceback__", None)),
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


def mark_ended() -> None:
    """Write the ``ended-`` header and point ``faulthandler`` at that file (never raises)."""
    try:
        import faulthandler
        import json
        import time

        directory = os.environ.get(ENV_DIAG_DIR)
        if not directory or _ENDED or faulthandler.is_enabled():
            return
        host = os.uname().nodename
        f = open(os.path.join(directory, f"{ENDED_PREFIX}{host}-{os.getpid()}.txt"), "w")  # noqa: SIM115
        json.dump({"host": host, "pid": os.getpid(), "time": time.time(),
                   "rank": os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK"),
                   "argv": list(getattr(sys, "argv", []))[:6]}, f)
        f.write("\n")
        f.flush()
        _ENDED.append(f)
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
    """Wrap the hooks (the original behaviour is kept: each wrapper calls the original)."""
    if not os.environ.get(ENV_DIAG_DIR):
        return
    from _sm_emulator_importhook import when_imported

    if not getattr(sys.excepthook, "_sm_emulator_exits", False):
        sys.excepthook = _excepthook(sys.excepthook)
    when_imported("threading", _on_threading)
    when_imported("multiprocessing.process", _on_multiprocessing)
