"""Code that runs *inside* emulated hosts, and nothing else does.

- ``site/`` goes on every host's ``PYTHONPATH``: a ``sitecustomize`` that, only when
  ``EMULATOR_INHOST=1``, installs lazy patches (CUDA calls on CPU, ``nccl`` on gloo). It also
  holds the sshd stand-in (``_sm_emulator_sshd.py``), which the process backend mounts over
  ``/usr/sbin/sshd`` in hosts that cannot run OpenSSH's (not root).
- ``gpu/bin/`` goes first on ``PATH`` only in hosts whose instance type has GPUs: ``nvidia-smi``
  (reports the emulated GPUs, so the real toolkit computes ``SM_NUM_GPUS`` from it) and ``nvcc``
  (the GPU DLCs install the CUDA toolkit and put ``$CUDA_HOME/bin`` on ``PATH``, e.g.
  aws/deep-learning-containers ``pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu``; only
  ``--version`` is emulated, with the job's torch's CUDA release, so torch's ``CUDA_HOME`` and
  DeepSpeed's import find a toolkit; compiling fails and says so). A CPU host has neither, as a
  CPU instance has neither.
- ``smddp/bin/`` (``smddprun``, stand-in for AWS's wrapper) on ``PATH`` and ``smddp/site/`` (the
  ``smdistributed`` stand-in package) on ``PYTHONPATH`` only where the image ships SMDDP: GPU
  instance types (SageMaker's GPU DLCs). Elsewhere the toolkit takes its "smddprun not being used"
  path and ``import smdistributed`` fails, as in a CPU container.
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
SITE = ROOT / protocol.INHOST_SITE
GPU_BIN = ROOT / protocol.INHOST_GPU_BIN
SMDDP_BIN = ROOT / protocol.INHOST_SMDDP_BIN
SMDDP_SITE = ROOT / protocol.INHOST_SMDDP_SITE

__all__ = ["GPU_BIN", "ROOT", "SITE", "SMDDP_BIN", "SMDDP_SITE", "protocol"]
