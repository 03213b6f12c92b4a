"""Make the framework layers the suite's process-backend jobs use, before the suite starts.

Most jobs of ``tests/jobs`` name no ``framework_version`` and run in the emulator's default world
(the newest family's CPU image: :data:`emulator.job.dlc.CURRENT_IMAGE`); a few name the 2.13 DLC on a
CPU and on a GPU type (:data:`WORLDS`). Their layers are made once per machine (minutes: a CUDA torch
from PyPI, shared by the three). Made here, with progress, instead of inside whichever test happens
to start the first job, where the time would count against that job's ``MaxRuntimeInSeconds`` and
the test's own timeouts. On a warm machine this returns at once. The torch builds come from the
CPU index or from PyPI as the jobs' own would (:func:`emulator.backends.layers.torch_source`).

    python -m tests.warm        # nox -s tests runs it first
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from emulator.backends import layers
from emulator.job import dlc, frameworks
from emulator.job.instance_types import lookup

#: (framework_version, instance type) of the worlds the suite's jobs run in: the default one, and the
#: 2.13 DLC's CPU and GPU images (tests/jobs/test_framework_jobs.py, test_dlc_jobs.py, test_fidelity_jobs.py).
WORLDS = ((None, "ml.c5.xlarge"), ("2.13", "ml.c5.xlarge"), ("2.13", "ml.p4d.24xlarge"))


def _sources(version: str | None, itype: str) -> Callable[[str | None], dlc.InstallSet]:
    """The world's install set for a torch source (a CPU index, or None: PyPI)."""
    def of(index: str | None) -> dlc.InstallSet:
        return frameworks.install_for(frameworks.select(version) if version else None, lookup(itype),
                                      torch_index=index)
    return of


def main() -> int:
    installs = [layers.torch_source(_sources(version, itype)) for version, itype in WORLDS]
    missing = {layer.path: layer for install in installs for layer in layers.layers(install) if not layer.ready}
    if not missing:
        return 0
    log = Path(tempfile.gettempdir()) / f"sm-emulator-warm-{os.getpid()}.log"
    for layer in missing.values():
        print(f"warm: making the framework layer of {layer.what} (once per machine; pip's output: {log})",
              flush=True)
    start = time.monotonic()
    for install in installs:
        layers.ensure(install, log)
    log.unlink(missing_ok=True)
    print(f"warm: framework layers ready in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
