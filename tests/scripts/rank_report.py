"""Each rank reports what it sees, into /opt/ml/model (merged into model.tar.gz)."""

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--msg", default="")
parser.add_argument("--backend", default="nccl")
args = parser.parse_args()

dist.init_process_group(args.backend)
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
report = {
    "host": socket.gethostname(),
    "rank": os.environ.get("RANK"),
    "local_rank": os.environ.get("LOCAL_RANK"),
    "world_size": os.environ.get("WORLD_SIZE"),
    "pg_world_size": dist.get_world_size(),
    "master_addr": os.environ.get("MASTER_ADDR"),
    "master_port": os.environ.get("MASTER_PORT"),
    "master_ip": socket.gethostbyname(os.environ["MASTER_ADDR"]),
    "own_ip": socket.gethostbyname(socket.gethostname()),
    "sum": t.item(),
    "msg": args.msg,
    "sm_num_gpus": os.environ.get("SM_NUM_GPUS"),
    "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
    "cuda_available": torch.cuda.is_available(),
    "opt_ml": sorted(os.listdir("/opt/ml")),
    "aws_keys": sorted(k for k in os.environ if k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET")),
}
with open(f"/opt/ml/model/rank-{rank}.json", "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
