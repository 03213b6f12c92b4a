"""The patch registry's checks in real in-host processes (see ``_sm_emulator_patches``)."""

from __future__ import annotations

from typing import Any

from tests.jobs.inhost.conftest import free_port


def test_a_critical_target_that_changed_stops_the_process(run_script: Any) -> None:
    """Were ``all_reduce``'s ``op`` renamed, the smddp check would read no op and let AVG through;
    the import that installs the checks fails instead, naming what changed."""
    result = run_script(
        """
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        def all_reduce(tensor, operation=None, group=None, async_op=False):  # a future torch, say
            return None

        c10d.all_reduce = dist.all_reduce = all_reduce
        import smdistributed.dataparallel.torch.torch_smddp
        say("not reached")
        """
    )
    assert result.returncode != 0 and "not reached" not in result.stdout
    assert "PatchMismatch" in result.stderr
    assert ("[emulator] patch torch.distributed.distributed_c10d.all_reduce [smddp-limits]: the target differs "
            "from torch 2.13.0 (parameter(s) op not found; expected (tensor, op=<RedOpType.SUM: 0>, group=None, "
            "async_op=False), found (tensor, operation=None, group=None, async_op=False)); this process stops"
            ) in result.stderr


def test_wrapped_barrier_keeps_every_parameter(run_script: Any) -> None:
    """The gloo wrapper of ``barrier`` binds the original's own signature: ``timeout`` (new in
    torch 2.x) still reaches torch, ``device_ids`` is dropped for gloo."""
    out = run_script(
        """
        import datetime, os
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        dist.init_process_group("nccl", rank=0, world_size=1)
        dist.barrier(timeout=datetime.timedelta(seconds=60))
        dist.barrier(device_ids=[0])
        dist.barrier(None, False, [1], datetime.timedelta(seconds=60))
        say("backend", dist.get_backend())
        dist.destroy_process_group()
        """,
        PORT=str(free_port()),
    ).ok()
    assert "backend gloo" in out
