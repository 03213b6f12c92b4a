"""The emulated GPUs' caching allocator: rounding, pools, segments, the OOM text; the capacity option.

Oracles: the constants and rules ``c10/cuda/CUDACachingAllocator.cpp`` documents (torch 2.x; the
constants now in ``c10/core/AllocatorConfig.h``): "all sizes are rounded to at least 512 bytes"
(kMinBlockSize = 512), "largest 'small' allocation is 1 MiB" (kSmallSize), "'small' allocations
are packed in 2 MiB blocks" (kSmallBuffer), "'large' allocations may be packed in 20 MiB blocks"
(kLargeBuffer), "allocations between 1 and 10 MiB may use kLargeBuffer" (kMinLargeAlloc), "round
up large allocations to 2 MiB" (kRoundLarge); ``should_split`` (a small block splits when at least
512 bytes remain, a large one when more than 1 MiB does); and ``DeviceCachingAllocator::malloc``'s
``OutOfMemoryError`` text with c10's ``format_size`` (two decimals; bytes up to 1024, KiB up to
1 MiB, MiB up to 1 GiB), written out here as literals.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.errors import RequestError
from emulator.inhost.site import _sm_emulator_allocator as alloc
from emulator.job import request as rq

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


class OOM(Exception):
    pass


def device(capacity: int = 16 * GIB, context: int = 300 * MIB) -> alloc.DeviceAllocator:
    return alloc.DeviceAllocator(0, capacity, context=context, error=OOM)


@pytest.mark.parametrize(("request_bytes", "rounded"), [
    (1, 512), (4, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (4096, 4096), (4097, 4608),
])
def test_every_request_is_rounded_up_to_512_bytes(request_bytes: int, rounded: int) -> None:
    assert alloc.round_size(request_bytes) == rounded
    a = device()
    a.malloc(request_bytes)
    assert a.allocated == rounded
    assert a.stat("requested_bytes").current == request_bytes


@pytest.mark.parametrize(("request_bytes", "pool", "segment"), [
    (512, "small_pool", 2 * MIB),
    (MIB, "small_pool", 2 * MIB),  # 1 MiB is still small
    (MIB + 1, "large_pool", 20 * MIB),  # 1 to 10 MiB: a 20 MiB block
    (10 * MIB - 512, "large_pool", 20 * MIB),
    (10 * MIB, "large_pool", 10 * MIB),  # from 10 MiB: the request rounded up to 2 MiB
    (11 * MIB, "large_pool", 12 * MIB),
    (GIB, "large_pool", GIB),
])
def test_pools_and_segment_sizes(request_bytes: int, pool: str, segment: int) -> None:
    a = device()
    a.malloc(request_bytes)
    assert a.reserved == segment
    assert a.stat("reserved_bytes", pool).current == segment
    assert a.stat("segment", pool).current == 1


def test_small_requests_share_a_2_mib_segment_until_it_is_full() -> None:
    a = device()
    for _ in range(2 * MIB // 512):
        a.malloc(100)
    assert (a.allocated, a.reserved) == (2 * MIB, 2 * MIB)
    a.malloc(100)
    assert (a.allocated, a.reserved) == (2 * MIB + 512, 4 * MIB)


def test_large_requests_split_a_20_mib_block_while_more_than_1_mib_remains() -> None:
    a = device()
    blocks = [a.malloc(5 * MIB) for _ in range(4)]  # 5 + 5 + 5 + 5: the last takes the 5 MiB left
    assert (a.allocated, a.reserved) == (20 * MIB, 20 * MIB)
    a.malloc(5 * MIB)
    assert a.reserved == 40 * MIB
    b = device()
    b.malloc(19 * MIB + 512)  # 512 KiB remain: not more than 1 MiB, so the block is not split
    assert (b.allocated, b.reserved) == (20 * MIB, 20 * MIB)
    assert blocks


def test_freed_blocks_stay_reserved_until_empty_cache_and_merge() -> None:
    a = device()
    blocks = [a.malloc(5 * MIB) for _ in range(3)]
    for block in blocks:
        a.free(block)
    assert (a.allocated, a.reserved) == (0, 20 * MIB)
    a.malloc(20 * MIB - MIB)  # the freed pieces merged back into one 20 MiB block: no new segment
    assert a.reserved == 20 * MIB
    c = device()
    c.free(c.malloc(3 * MIB))
    c.release_cached()
    assert (c.allocated, c.reserved) == (0, 0)
    assert (c.stat("reserved_bytes").peak, c.stat("allocated_bytes").peak) == (20 * MIB, 3 * MIB)


def test_peaks_reset_to_the_current_values() -> None:
    a = device()
    a.free(a.malloc(GIB))
    a.malloc(MIB)
    assert a.stat("allocated_bytes").peak == GIB
    a.reset_peaks()
    assert a.stat("allocated_bytes").peak == MIB
    assert a.stat("reserved_bytes").peak == GIB + 2 * MIB


def test_out_of_memory_has_cudas_text() -> None:
    a = device(capacity=2 * GIB)
    a.malloc(GIB)
    with pytest.raises(OOM) as info:
        a.malloc(GIB)
    assert str(info.value) == (
        "CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 2.00 GiB of which "
        "724.00 MiB is free. Including non-PyTorch memory, this process has 1.29 GiB memory in use. Of the "
        "allocated memory 1024.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    assert a.memory_stats()["num_ooms"] == 1
    assert a.allocated == GIB  # the failed request took nothing


def test_cached_segments_are_released_and_the_allocation_retried() -> None:
    a = device(capacity=2 * GIB)
    a.free(a.malloc(GIB))  # 1 GiB cached; 2 GiB - 300 MiB context - 1 GiB = 724 MiB free on the device
    a.malloc(GIB + 512 * MIB)  # does not fit beside the cached segment: released, then retried
    assert (a.reserved, a.num_alloc_retries, a.num_ooms) == (GIB + 512 * MIB, 1, 0)


def test_memory_fraction_limits_reserved_memory() -> None:
    a = device(capacity=2 * GIB)
    a.fraction = 0.5
    a.malloc(GIB - 2 * MIB)
    with pytest.raises(OOM, match=r"is free\. Including non-PyTorch memory, this process has .* memory in use\. "
                                  r"1024\.00 MiB allowed; Of the allocated memory"):
        a.malloc(4 * MIB)


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 bytes"), (1024, "1024 bytes"), (1025, "1.00 KiB"), (MIB, "1024.00 KiB"), (MIB + 1, "1.00 MiB"),
    (GIB, "1024.00 MiB"), (GIB + 1, "1.00 GiB"), (15_835_660_288, "14.75 GiB"),
])
def test_format_size_is_c10s(size: int, text: str) -> None:
    assert alloc.format_size(size) == text


def test_memory_stats_has_the_keys_tools_read() -> None:
    a = device()
    a.free(a.malloc(3000))
    stats = a.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "active_bytes.all.peak", "num_ooms", "num_alloc_retries"):
        assert key in stats
    assert (stats["allocated_bytes.all.peak"], stats["active_bytes.all.peak"]) == (3072, 3072)
    assert stats["reserved_bytes.all.current"] == 2 * MIB


# -- the per-job capacity override (bad input) ----------------------------------------------------
def _create(tmp_path: Path, **options: object) -> rq.JobRequest:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return rq.create(entry_point="train.py", source_dir=tmp_path, output_path=tmp_path / "out", **options)


@pytest.mark.parametrize("gib", [0, -1, 0.0, 22.6, 1e9, True, "10"])
def test_capacity_override_must_be_positive_and_at_most_the_devices(tmp_path: Path, gib: object) -> None:
    with pytest.raises(RequestError) as info:
        _create(tmp_path, instance_type="ml.g5.2xlarge", gpu_memory_gib=gib)
    assert info.value.field == "gpu_memory_gib"
    assert "22.49" in str(info.value)  # the A10G's 24146608128 bytes as CUDA reports them, in GiB


def test_capacity_override_on_a_cpu_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as info:
        _create(tmp_path, instance_type="ml.m5.xlarge", gpu_memory_gib=4)
    assert info.value.field == "gpu_memory_gib"


def test_capacity_override_and_mode_reach_the_hosts(tmp_path: Path) -> None:
    from emulator.backends.base import Runtime
    from emulator.job import plan as planning

    request = _create(tmp_path, instance_type="ml.g5.2xlarge", gpu_memory_gib=10, gpu_memory="count")
    runtime = Runtime(python="/usr/bin/python3", train_command=("train",), inhost_root="/inhost",
                      base_env={"HOME": "/root"}, path="/usr/bin")
    host = planning.build(request, runtime=runtime, caller_env={}, num_cpus=2).hosts[0]
    assert host.env["EMULATOR_GPU_MEMORY"] == str(10 * GIB) and host.env["EMULATOR_GPU_MEMORY_MODE"] == "count"
    assert host.to_dict()["emulated_gpu_memory"].startswith("counted")
    default = planning.build(_create(tmp_path, instance_type="ml.g5.2xlarge"), runtime=runtime, caller_env={},
                             num_cpus=2).hosts[0]  # off unless asked (its cost: the module docstring)
    assert "EMULATOR_GPU_MEMORY_MODE" not in default.env
    assert "not counted" in default.to_dict()["emulated_gpu_memory"]
    counted = planning.build(_create(tmp_path, instance_type="ml.g5.2xlarge", gpu_memory="count"), runtime=runtime,
                             caller_env={}, num_cpus=2).hosts[0]
    said = counted.to_dict()["emulated_gpu_memory"]
    assert said.startswith("counted") and "22.49 GiB" in said


def test_unknown_gpu_memory_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestError) as info:
        _create(tmp_path, instance_type="ml.g5.2xlarge", gpu_memory="fake")
    assert info.value.field == "gpu_memory"
