"""The host protocol as the emulator imports it: ``emulator.inhost.protocol``.

The module itself is ``site/_sm_emulator_protocol.py`` (in-host code imports it under that name);
this file only re-exports it, so both sides read one definition.
"""

from __future__ import annotations

from .site._sm_emulator_protocol import *  # noqa: F403
