"""Streams, events and NVTX on emulated GPUs, in one process (the 2 x 2 job is in
``tests/jobs/test_cuda_streams_jobs.py``). Expected values are CUDA's documented behaviour: the current
stream is the default one until set, ``stream(s)`` restores the previous one, ``elapsed_time``
needs two timed, recorded events, NVTX push/pop without a tool return -2."""

from __future__ import annotations

from typing import Any

STREAMS_SCRIPT = """
import time, torch

default = torch.cuda.default_stream()
assert torch.cuda.current_stream() is default and default.stream_id == 0 and default.cuda_stream == 0
s = torch.cuda.Stream()
assert s != default and isinstance(s, torch.Stream) and isinstance(s, torch.cuda.streams.Stream)
with torch.cuda.stream(s):
    assert torch.cuda.current_stream() is s
    torch.ones(2, device="cuda").record_stream(s)
assert torch.cuda.current_stream() is default
with s:
    assert torch.cuda.current_stream() is s
assert torch.cuda.current_stream() is default
with torch.cuda.device(1):
    assert torch.cuda.current_stream().device == torch.device("cuda", 1)
    assert torch.cuda.Stream().device_index == 1
assert torch.cuda.Stream(device="cuda:1").device_index == 1
say("priorities", torch.cuda.Stream.priority_range(), [torch.cuda.Stream(priority=p).priority for p in (5, 0, -1, -9)])
default.wait_stream(s); s.wait_event(s.record_event()); s.synchronize()
assert s.query() and default.query()

a, b, plain = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), torch.cuda.Event()
assert repr(a) == "<torch.cuda.Event uninitialized>" and a.query()
try:
    a.elapsed_time(b)
except ValueError as error:
    say("unrecorded", error)
a.record()
time.sleep(0.02)
b.record(s)
plain.record(); plain.wait(s); plain.synchronize()
say("elapsed", a.elapsed_time(b) >= 20.0, b.elapsed_time(a) <= -20.0)
try:
    plain.elapsed_time(b)
except ValueError as error:
    say("untimed", error)
try:
    torch.cuda.Stream(device=2)
except RuntimeError as error:
    say("ordinal", "invalid device ordinal" in str(error))

nvtx = torch.cuda.nvtx
say("nvtx", nvtx.range_push("a"), nvtx.range_pop(), nvtx.range_start("b"), nvtx.mark("c"))
with nvtx.range("d {}", 1):
    pass
with torch.profiler.profile() as profiler:
    nvtx.range_push("pushed")
    with nvtx.range("ranged {}", 2):
        torch.ones(2) + 1
    nvtx.range_pop()
    nvtx.mark("marked")
    nvtx.range_end(nvtx.range_start("started"))
keys = {e.key for e in profiler.key_averages()}
say("profiled", sorted(keys & {"pushed", "ranged 2", "marked", "started"}))
"""


def test_streams_events_and_nvtx(run_script: Any) -> None:
    out = run_script(STREAMS_SCRIPT).ok()
    assert "priorities (0, -3) [0, 0, -1, -3]" in out
    assert "unrecorded Both events must be recorded before calculating elapsed time." in out
    assert "elapsed True True" in out
    assert "untimed Both events must be created with argument 'enable_timing=True'." in out
    assert "ordinal True" in out
    assert "nvtx -2 -2 0 None" in out
    assert "profiled ['marked', 'pushed', 'ranged 2', 'started']" in out


def test_without_gpus_streams_fail_as_on_a_cpu_build(run_script: Any) -> None:
    result = run_script("import torch\ntorch.cuda.nvtx.range_push('x')\n", gpus=0)
    assert result.returncode != 0 and "NVTX functions not installed" in result.stderr
