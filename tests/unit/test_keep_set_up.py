"""Keeping a host waits until bwrap has set it up (``emulator.backends.process.backend._wait_set_up``).

A host's PID 1 is bwrap while bwrap makes the host's mounts; then it execs the host's command
(``--as-pid-1``). A host frozen before that exec keeps a half-made filesystem. The oracle is the
kernel's ``/proc/<pid>/exe``: the stand-in below is a copy of ``sh`` named ``bwrap`` that execs
``sleep`` once the test lets it, so after the wait its executable must be ``sleep``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from emulator.backends.process.backend import _wait_set_up


def test_keep_waits_until_pid_1_is_no_longer_bwrap(tmp_path: Path) -> None:
    bwrap = tmp_path / "bwrap"
    shutil.copy2(shutil.which("sh") or "/bin/sh", bwrap)
    sleep = shutil.which("sleep") or "/bin/sleep"
    go = tmp_path / "go"
    proc = subprocess.Popen([str(bwrap), "-c", f'while [ ! -e "{go}" ]; do {sleep} 0.02; done; exec {sleep} 30'])
    try:
        assert Path(os.readlink(f"/proc/{proc.pid}/exe")).name == "bwrap"  # "setting up" until go exists
        threading.Timer(0.3, go.touch).start()
        _wait_set_up(proc.pid, 60)
        assert Path(os.readlink(f"/proc/{proc.pid}/exe")).name == "sleep"
    finally:
        proc.kill()
        proc.wait()
