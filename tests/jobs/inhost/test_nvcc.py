"""The emulated ``nvcc`` of GPU hosts (``emulator/inhost/gpu/bin/nvcc``), run as a process.

Oracles: AWS's GPU DLCs install the CUDA toolkit and put ``$CUDA_HOME/bin`` on ``PATH``
(aws/deep-learning-containers ``pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu``:
``ENV CUDA_HOME="/usr/local/cuda"``, ``ENV PATH="${CUDA_HOME}/bin:${PATH}"``,
``cuda-toolkit-12=${CUDA_VERSION}`` with CUDA 12.4.1 under torch ``+cu124``); DeepSpeed's
``installed_cuda_version`` reads the word after ``release`` in ``nvcc -V`` (op_builder/builder.py),
done here the same way; torch's own ``_find_cuda_home`` locates the toolkit from ``nvcc`` on ``PATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from emulator.inhost import GPU_BIN

NVCC = GPU_BIN / "nvcc"


def _run(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{GPU_BIN}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([str(NVCC), *args], capture_output=True, text=True, env=env, timeout=60)


def _fake_torch(root: Path, cuda: str | None) -> Path:
    """A ``torch`` package whose ``version.py`` is what a CUDA (or CPU) build of torch writes."""
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("raise ImportError('the stand-in must not import torch')\n")
    (root / "torch" / "version.py").write_text(
        "from typing import Optional\n__version__ = '2.5.1'\n"
        f"cuda: Optional[str] = {cuda!r}\n")
    return root


def test_version_is_the_torch_builds_cuda_release_as_deepspeed_reads_it(tmp_path: Path) -> None:
    done = _run("-V", pythonpath=_fake_torch(tmp_path, "12.4"))
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    release = words[words.index("release") + 1].replace(",", "").split(".")
    assert (int(release[0]), int(release[1])) == (12, 4)


def test_torch_finds_the_toolkit_through_it(tmp_path: Path) -> None:
    """torch's ``_find_cuda_home`` (what ``torch.utils.cpp_extension.CUDA_HOME`` is) on a host's PATH."""
    code = "import torch.utils.cpp_extension as c; print(c._find_cuda_home())"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = f"{GPU_BIN}:{Path(sys.executable).parent}:/usr/bin:/bin"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == str(GPU_BIN.parent), done.stderr


def test_a_cpu_torch_has_no_release_and_compiling_is_not_emulated(tmp_path: Path) -> None:
    cpu = _run("--version", pythonpath=_fake_torch(tmp_path, None))
    assert cpu.returncode == 1 and "not a CUDA build" in cpu.stderr
    compile_ = _run("-c", "kernel.cu", "-o", "kernel.o")
    assert compile_.returncode == 1 and "compiling CUDA code is not emulated" in compile_.stderr
