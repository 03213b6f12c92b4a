"""MPI-family rank: dump this rank's environment and an all_reduce result to /opt/ml/model.

Launched by the real toolkit as ``mpirun ... [smddprun] python -m mpi4py mpi_env_report.py``.
``--mode mpi``: the sum goes through mpi4py (Open MPI's TCP btl). ``--mode ddp``: torch.distributed
with ``nccl`` (emulated on gloo) and ranks from ``OMPI_COMM_WORLD_*``, as a native-DDP script on
SageMaker must do. ``--mode smddp``: ``smdistributed.dataparallel`` with the ``smddp`` backend.
"""

from __future__ import annotations

import argparse
import json
import os
import socket


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="mpi")
    parser.add_argument("--msg", default="")
    args, _ = parser.parse_known_args()
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if args.mode == "mpi":
        from mpi4py import MPI

        total = float(MPI.COMM_WORLD.allreduce(rank + 1, op=MPI.SUM))
        mpi_rank = MPI.COMM_WORLD.Get_rank()
    else:
        import torch
        import torch.distributed as dist

        if args.mode == "smddp":
            import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401

            dist.init_process_group("smddp")
        else:
            dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=size)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        total = float(t.item())
        mpi_rank = dist.get_rank()
        dist.destroy_process_group()
    import inspect

    import gethostname  # sagemaker-training's; its mpirun passes -x LD_PRELOAD=inspect.getfile(gethostname)

    report = {"env": dict(os.environ), "hostname": socket.gethostname(), "sum": total,
              "comm_rank": mpi_rank, "gethostname_file": inspect.getfile(gethostname)}
    host = os.environ.get("SM_CURRENT_HOST", "?")
    path = f"/opt/ml/model/env-{socket.gethostname()}-{rank}.json"
    with open(path, "w") as f:
        json.dump(report, f)
    print(f"rank {rank}/{size} on {socket.gethostname()} (SM_CURRENT_HOST={host}): sum={total}")


if __name__ == "__main__":
    main()
