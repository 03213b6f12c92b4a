"""One rank dies first, the others fail after it (tests/jobs/test_first_death.py).

Every rank joins a gloo group and does one ``all_reduce``. Then rank ``--rank`` dies (``--how``):

- ``segfault``: reads address 0 through ``ctypes.string_at`` (SIGSEGV in C, as a crash in a
  native extension ends a rank);
- ``raise``: raises a ``RuntimeError`` nobody catches.

The other ranks wait in a second ``all_reduce`` that the dead rank never joins: gloo ends their
wait with a connection error ("Connection closed by peer" / "Connection reset by peer") or
torchrun stops them, after the first death.
"""

import argparse

import torch
import torch.distributed as dist


def crash():
    import ctypes

    ctypes.string_at(0)  # FIRST-DEATH-SEGFAULT


def give_up(rank):
    raise RuntimeError(f"rank {rank} gives up on purpose")  # FIRST-DEATH-RAISE


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--how", choices=["segfault", "raise"], default="segfault")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()}: first all_reduce gave {total.item():g}", flush=True)
    if dist.get_rank() == args.rank:
        if args.how == "segfault":
            crash()  # CALLS-CRASH
        else:
            give_up(args.rank)
    dist.all_reduce(total)  # waits for the dead rank: fails after it
    print(f"rank {dist.get_rank()}: not reached", flush=True)


if __name__ == "__main__":
    main()
