"""Code that runs *inside* emulated hosts, and nothing else does.

- ``bin/`` goes first on each host's ``PATH``: ``nvidia-smi`` (reports the emulated GPUs, so the
  real toolkit computes ``SM_NUM_GPUS`` from it) and ``smddprun`` (stand-in for AWS's wrapper).
- ``site/`` goes on each host's ``PYTHONPATH``: a ``sitecustomize`` that, only when
  ``EMULATOR_INHOST=1``, installs lazy patches (CUDA calls on CPU, ``nccl``/``smddp`` on gloo) and
  the ``smdistributed`` stand-in package. It also holds the sshd stand-in
  (``_sm_emulator_sshd.py``), which the process backend mounts over ``/usr/sbin/sshd`` in hosts
  that cannot run OpenSSH's (not root).
- :mod:`.protocol` (``site/_sm_emulator_protocol.py``): the names, paths and conventions both
  sides share; import them from there.
- :mod:`.patches` (``site/_sm_emulator_patches.py``): the registry of every third-party attribute
  the in-host code replaces, with the checks run before patching.

This package is mounted read-only into containers, so nothing under it may import the rest of
``emulator``.
"""

from __future__ import annotations

from pathlib import Path

from . import protocol

ROOT = Path(__file__).resolve().parent
BIN = ROOT / "bin"
SITE = ROOT / "site"

__all__ = ["BIN", "ROOT", "SITE", "protocol"]
