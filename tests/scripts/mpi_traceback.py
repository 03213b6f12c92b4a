"""Under mpirun: every rank prints a line in pieces; odd ranks then die of a traceback three frames deep."""

import os
import sys
import time

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
sys.stdout.write(f"rank {rank} says ")
sys.stdout.flush()
time.sleep(0.2)
print("hello", flush=True)


def inner() -> None:
    raise RuntimeError(f"boom on rank {rank}")


def middle() -> None:
    inner()


if rank % 2 == 1:
    middle()
time.sleep(3)
