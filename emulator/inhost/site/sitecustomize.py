"""Emulator in-host start-up hook (sagemaker-cluster-emulator).

Runs at interpreter start in every Python process of an emulated host (this folder is on the
host's PYTHONPATH). Does nothing unless EMULATOR_INHOST=1; then installs the lazy patches of
``_sm_emulator_hooks`` (nothing heavy is imported here).
"""

import os

from _sm_emulator_names import ENV_FAST_START, ENV_INHOST

if os.environ.get(ENV_INHOST) == "1":
    try:
        import _sm_emulator_hooks
    except ImportError:  # pragma: no cover - partial install
        pass
    else:
        _sm_emulator_hooks.install()
    if os.environ.get(ENV_FAST_START) == "1":  # opt-in: see _sm_emulator_faststart
        import _sm_emulator_faststart

        _sm_emulator_faststart.activate()
