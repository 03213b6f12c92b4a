"""The patch registry as the emulator imports it: ``emulator.inhost.patches``.

The module itself is ``site/_sm_emulator_patches.py`` (in-host code imports it under that name);
this file only re-exports it. ``python -m emulator.inhost.patches --markdown`` prints the table
of patches in ``docs/reference/patches.md``, ``--check`` checks every entry against the packages installed here.
"""

from __future__ import annotations

import sys

from .site._sm_emulator_patches import *  # noqa: F403
from .site._sm_emulator_patches import main

if __name__ == "__main__":
    sys.exit(main())
