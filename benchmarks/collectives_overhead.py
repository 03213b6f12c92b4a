"""Overhead of collective recording on the benchmark's Lightning fit.

``python -m benchmarks.collectives_overhead [--reps N] [--steps S]`` runs
``benchmarks/workloads/lightning_fit.py`` under ``torchrun --nproc_per_node 2`` with the in-host
site folder (as an emulated host runs it), alternately with recording on (the default) and off
(``EMULATOR_COLLECTIVES=0``), and prints the median time from the end of ``import torch`` and
Lightning to ``BENCH_DONE`` on rank 0 (the fit, with DDP set-up; interpreter and import time
excluded), the ratio of medians, and how many collectives the ranks recorded.

On a busy machine that ratio is dominated by noise; ``--micro`` measures the recorder's own cost
per collective instead: one process, a one-rank gloo group, N small ``all_reduce`` calls with and
without recording (interleaved blocks, median per call). Cost on the fit ≈ cost per call × the
collectives the fit issues (printed by the first mode).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from emulator.diagnostics import collectives
from emulator.inhost import GPU_BIN, SITE

ROOT = Path(__file__).resolve().parent
WORKLOAD = ROOT / "workloads" / "lightning_fit.py"
#: Imports the heavy modules first, stamps the time, then runs the workload unchanged.
WRAPPER = """\
import runpy, sys, time
import torch
try:
    import lightning.pytorch
except ImportError:
    import pytorch_lightning
print(f"BENCH_IMPORTED {time.time():.6f}", flush=True)
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def once(record: bool, steps: int, port: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "wrapper.py"
        wrapper.write_text(WRAPPER)
        diag = Path(tmp) / "diag"
        diag.mkdir()
        env = {**os.environ, "PYTHONPATH": str(SITE), "EMULATOR_INHOST": "1", "EMULATOR_DIAG_DIR": str(diag),
               "EMULATOR_COLLECTIVES": "1" if record else "0", "BENCH_STEPS": str(steps),
               "OMP_NUM_THREADS": "1", "PATH": f"{GPU_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        torchrun = Path(sys.executable).with_name("torchrun")
        out = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                              "--master_port", str(port), str(wrapper), str(WORKLOAD)],
                             env=env, capture_output=True, text=True, check=True, cwd=tmp).stdout
        imported = [float(x) for x in re.findall(r"BENCH_IMPORTED (\d+\.\d{6})", out)]
        done = [float(x) for x in re.findall(r"BENCH_DONE (\d+\.\d{6}) rank=0", out)]
        records, _ = collectives.load(diag)
        return done[0] - max(imported), sum(len(r.calls) for r in records)


MICRO = """\
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
t = torch.ones(8)
for _ in range(200):
    dist.all_reduce(t)
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
    dist.all_reduce(t)
print(f"PER_CALL {(time.perf_counter() - start) / int(sys.argv[2]) * 1e6:.3f}")
"""


def micro(calls: int, reps: int) -> None:
    """Per-call cost of recording (microseconds), interleaved on/off runs."""
    per: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(reps):
            for record in (True, False):
                diag = Path(tmp) / f"diag-{i}-{record}"
                diag.mkdir()
                env = {**os.environ, "PYTHONPATH": str(SITE), "EMULATOR_INHOST": "1", "EMULATOR_DIAG_DIR": str(diag),
                       "EMULATOR_COLLECTIVES": "1" if record else "0", "OMP_NUM_THREADS": "1"}
                out = subprocess.run([sys.executable, "-c", MICRO, str(29300 + 2 * i + record), str(calls)], env=env,
                                     capture_output=True, text=True, check=True).stdout
                per[record].append(float(re.findall(r"PER_CALL (\S+)", out)[0]))
    on, off = statistics.median(per[True]), statistics.median(per[False])
    print(f"all_reduce of 8 floats, 1-rank gloo: {on:.1f} us with recording, {off:.1f} us without: "
          f"{on - off:.1f} us per collective ({reps} runs of {calls} calls each)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--micro", type=int, metavar="CALLS", help="measure the cost per collective instead")
    args = parser.parse_args()
    if args.micro:
        micro(args.micro, args.reps)
        return
    on: list[float] = []
    off: list[float] = []
    count = 0
    for i in range(args.reps):  # interleaved, so a change of the machine's load hits both alike
        seconds, count = once(True, args.steps, 29400 + 2 * i)
        on.append(seconds)
        off.append(once(False, args.steps, 29401 + 2 * i)[0])
        print(f"rep {i + 1}: recording on {on[-1]:.2f} s, off {off[-1]:.2f} s", flush=True)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"median on {statistics.median(on):.2f} s, off {statistics.median(off):.2f} s, ratio {ratio:.3f} "
          f"({(ratio - 1) * 100:+.1f} %), {count} collectives recorded per run (both ranks), "
          f"{args.steps} steps, {args.reps} repetitions")


if __name__ == "__main__":
    main()
