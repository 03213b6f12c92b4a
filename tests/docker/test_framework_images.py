"""Framework images (docker/build.py --framework, emulator/backends/docker/images.py) and the in-host package on
their torch: the torch 1.12 image runs the CUDA-on-CPU patches, nccl -> gloo and the smddp
stand-in as the docker backend mounts them (``inhost_mounts``: the in-host folder read-only at
/opt/sm-emulator/inhost, ``PYTHONPATH=<inhost>/site``, ``EMULATOR_INHOST=1``,
``EMULATOR_GPU_COUNT``).

The image tests are skipped unless the torch 1.12 image is built (``nox -s image -- --framework
1.12``; .ci/setup builds it). Oracles: torch's own results (a 2-rank all_reduce SUM of ranks
1 and 2 is 3; gloo is what the group reports), Lightning's own ``Trainer``.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from emulator.backends.docker import images
from emulator.inhost import ROOT as INHOST
from emulator.job import dlc, frameworks
from emulator.job import request as rq

from ..conftest import require

#: The torch 1.12 GPU DLC's stand-in (the SMDDP launchers' ml.p4d.24xlarge).
IMAGE = dlc.pytorch_image("1.12", gpu=True)


def _tag() -> str | None:
    try:
        return images.built_image(IMAGE)
    except Exception:  # no docker CLI / engine
        return None


TAG = _tag()
@pytest.fixture
def _family_image() -> None:
    """Skips locally, fails under ``CI=true`` (``require`` in conftest.py)."""
    require("a torch 1.12 job", [] if TAG is not None else
            ["the torch 1.12 image (nox -s image -- --framework 1.12)"])


needs_image = pytest.mark.usefixtures("_family_image")


def test_no_dlc_named_runs_the_default_world_image(tmp_path: Path) -> None:
    """Nothing asked and ``current`` both run the default image (the default world's, dlc.CURRENT_IMAGE),
    whatever the instance type; a framework version runs its family's image for the type."""
    (tmp_path / "train.py").write_text("")
    def planned(**kwargs: object) -> images.JobImage:
        return images.planned(rq.create(entry_point="train.py", source_dir=str(tmp_path),
                                        output_path=str(tmp_path), **kwargs))

    for kwargs in ({}, {"framework_version": "current"}, {"instance_type": "ml.p4d.24xlarge"}):
        image = planned(**kwargs)
        assert image.dlc is not None and image.dlc.id == dlc.CURRENT_IMAGE
        assert image.tag == "sagemaker-emulator:latest"  # `nox -s image` tags the default world's image so
    gpu = planned(framework_version="1.12.1", instance_type="ml.p4d.24xlarge")
    assert gpu.dlc == IMAGE and gpu.tag.startswith("sagemaker-emulator:pytorch-1.12-gpu-")
    assert frameworks.select("1.12.1") is not None


def _run(script: str, *, gpus: int = 2, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    assert TAG is not None
    cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python",
           f"--volume={INHOST}:/opt/sm-emulator/inhost:ro",
           "--env", "PYTHONPATH=/opt/sm-emulator/inhost/site:/opt/sm-emulator/inhost/smddp/site",
           "--env", "EMULATOR_INHOST=1",
           "--env", f"EMULATOR_GPU_COUNT={gpus}", "--env", "EMULATOR_GPU_MODEL=NVIDIA A100-SXM4-40GB",
           "--env", "SAGEMAKER_INSTANCE_TYPE=ml.p4d.24xlarge", *extra, TAG, "-c",
           textwrap.dedent(script)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@needs_image
def test_image_holds_the_family_torch_python_and_toolkits() -> None:
    done = _run("""
        import sys, torch, importlib.metadata as m
        print(sys.version_info[:2], torch.__version__,
              m.version('sagemaker-training'), m.version('sagemaker-pytorch-training'),
              m.version('pip'))
        """, gpus=0)
    assert done.returncode == 0, done.stderr
    # PyPI's torch 1.12.1 manylinux1 wheel is the CUDA 10.2 build: it reports "+cu102". The DLC's
    # Dockerfile (pytorch/training/docker/1.12/py3/cu113/Dockerfile.gpu) runs an unpinned
    # `pip install --upgrade pip`; on its build date (2023-02-14) PyPI's newest pip was 23.0
    # (23.0.1 was uploaded on 2023-02-17: pypi.org/project/pip/#history).
    assert done.stdout.split() == ["(3,", "9)", "1.12.1+cu102", "5.1.4", "3.0.0", "23.0"], done.stdout


@needs_image
def test_cuda_on_cpu_nccl_and_smddp_on_torch_1_12() -> None:
    done = _run("""
        import os, torch, torch.distributed as dist, torch.multiprocessing as mp

        def rank(r, backend):
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + len(backend)))
            if backend == "smddp":
                import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
            torch.cuda.set_device(r)
            dist.init_process_group(backend, rank=r, world_size=2)
            t = torch.tensor([float(r + 1)]).cuda()
            dist.all_reduce(t)
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1).cuda(),
                                                              device_ids=[r])
            model(torch.ones(1, 2).cuda()).sum().backward()
            if backend == "smddp":
                try:
                    dist.all_reduce(t, op=dist.ReduceOp.AVG)  # refused on SageMaker (observed)
                except RuntimeError as e:
                    print(f"refused {e}")
            print(f"rank {r} {backend} {dist.get_backend()} {t.item()} {t.device} "
                  f"{torch.cuda.is_available()} {torch.cuda.device_count()}", flush=True)
            dist.destroy_process_group()

        if __name__ == "__main__":
            for backend in ("nccl", "smddp"):
                mp.start_processes(rank, args=(backend,), nprocs=2, start_method="fork")
        """)
    out = done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    for r in (0, 1):
        assert f"rank {r} nccl gloo 3.0 cpu True 2" in out, out
        assert f"rank {r} smddp smddp 3.0 cpu True 2" in out, out
    assert out.count("refused SMDDP does not support: ReduceOp") == 2, out
