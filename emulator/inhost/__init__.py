"""Code that runs *inside* emulated hosts, and nothing else does.

- ``bin/`` goes first on each host's ``PATH``: ``nvidia-smi`` (reports the emulated GPUs, so the
  real toolkit computes ``SM_NUM_GPUS`` from it) and ``smddprun`` (stand-in for AWS's wrapper).
- ``site/`` goes on each host's ``PYTHONPATH``: a ``sitecustomize`` that, only when
  ``EMULATOR_INHOST=1``, installs lazy patches (CUDA calls on CPU, ``nccl``/``smddp`` on gloo) and
  the ``smdistributed`` stand-in package.

This package is mounted read-only into containers, so it must not import the rest of
``emulator``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent
BIN = ROOT / "bin"
SITE = ROOT / "site"

#: Environment variables the emulator sets in every host for the in-host code.
ENV_FLAG = "EMULATOR_INHOST"
ENV_GPU_COUNT = "EMULATOR_GPU_COUNT"
ENV_GPU_MODEL = "EMULATOR_GPU_MODEL"
