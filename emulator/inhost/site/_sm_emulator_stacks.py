"""Stack dumps on request: every Python process of a host can be asked where its threads are.

Installed by ``sitecustomize`` at interpreter start when ``EMULATOR_DIAG_DIR`` is set. Cost at
start: one ``open`` (the dump file, the only fd kept), one ``write`` (a one-line header) and one
``sigaction`` — no import beyond the built-in ``faulthandler`` and ``time``; nothing at all while the process
runs. ``faulthandler.register(STACKS_SIGNAL, all_threads=True)`` installs a C handler: on the
signal it writes every thread's Python stack (innermost frame first; at most 100 frames and 100
threads, as faulthandler does) to the file, even while a thread holds the GIL in a blocking C call
(``all_reduce`` waiting on a peer), and the process goes on. The emulator sends the signal only
before it stops a job (``emulator.diagnostics.stacks``).

File: ``<EMULATOR_DIAG_DIR>/stacks-<hostname>-<pid>.txt``, header line::

    # sm-emulator-stacks pid=<pid> main=0x<thread id> rank=<RANK|OMPI_COMM_WORLD_RANK|-> local=<..> start=<time>

then one faulthandler dump per signal received. A forked child (DataLoader worker, multiprocessing,
the fast-start zygote's ranks) re-opens its own file and registers again (``os.register_at_fork``),
so dumps never interleave. Not emulated: there is nothing like this on SageMaker.
"""

from __future__ import annotations

import os

# From ``_sm_emulator_names`` (``_sm_emulator_protocol`` imports dataclasses, ~15 ms: too slow for
# every process start).
from _sm_emulator_names import ENV_DIAG_DIR, STACKS_PREFIX, STACKS_SIGNAL

_FD: list[int] = []


def _rank() -> tuple[str, str]:
    env = os.environ
    rank = env.get("RANK") or env.get("OMPI_COMM_WORLD_RANK") or "-"
    local = env.get("LOCAL_RANK") or env.get("OMPI_COMM_WORLD_LOCAL_RANK") or "-"
    return rank, local


def _register() -> None:
    import _thread
    import faulthandler
    import time

    directory = os.environ.get(ENV_DIAG_DIR)
    if not directory:
        return
    pid = os.getpid()
    path = os.path.join(directory, f"{STACKS_PREFIX}{os.uname().nodename}-{pid}.txt")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    for old in _FD:  # the parent's file, inherited through fork
        try:
            os.close(old)
        except OSError:
            pass
    _FD[:] = [fd]
    rank, local = _rank()
    header = (f"# sm-emulator-stacks pid={pid} main={_thread.get_ident():#018x} rank={rank} local={local} "
              f"start={time.time():.3f}\n")
    try:
        os.write(fd, header.encode())
        faulthandler.register(STACKS_SIGNAL, file=fd, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        pass


def install() -> None:
    """Register the dump handler in this process and in every child it forks."""
    if not os.environ.get(ENV_DIAG_DIR):
        return
    _register()
    os.register_at_fork(after_in_child=_register)
