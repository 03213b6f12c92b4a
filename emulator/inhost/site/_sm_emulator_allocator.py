"""A model of PyTorch's CUDA caching allocator for one emulated GPU: sizes, pools, segments, OOM.

Pure bookkeeping (standard library only, no torch): :mod:`_sm_emulator_memory` calls
:meth:`DeviceAllocator.malloc` for each storage that lives on an emulated GPU and
:meth:`DeviceAllocator.free` when it dies; this module decides how many bytes that takes and when
the device is full. Its rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.x, the
constants now in ``c10/core/AllocatorConfig.h``), with the allocator's defaults
(``PYTORCH_CUDA_ALLOC_CONF`` unset):

- every request is rounded up to a multiple of ``kMinBlockSize`` = 512 bytes (``round_size``; a
  0-byte storage takes nothing: CUDA's allocator returns a null pointer for it);
- requests up to ``kSmallSize`` = 1 MiB come from the small pool, whose segments are
  ``kSmallBuffer`` = 2 MiB; larger ones from the large pool, whose segments are ``kLargeBuffer`` =
  20 MiB for requests under ``kMinLargeAlloc`` = 10 MiB, else the request rounded up to
  ``kRoundLarge`` = 2 MiB (``get_allocation_size``);
- a request takes the smallest free cached block of its pool that fits (best fit, lowest address
  on ties); a block is split when the remainder is at least 512 bytes (small pool) or more than
  1 MiB (large pool; ``should_split``); a freed block merges with its free neighbours;
- when no cached block fits, a new segment is taken from the device ("cudaMalloc"); when the
  device has no room for it, every cached segment with no block in use is released and the
  allocation retried (``release_cached_blocks``; ``num_alloc_retries``); when that fails too,
  ``num_ooms`` counts it and CUDA's ``OutOfMemoryError`` is raised with CUDA's message
  (:func:`oom_message`, the text of ``DeviceCachingAllocator::malloc``).

The device has ``capacity`` bytes (``total_memory``, the instance type's GPU as CUDA reports it,
or the job's override), of which :data:`CUDA_CONTEXT_BYTES` (an estimate: the CUDA context and the
kernels loaded for it, which a real process holds outside the caching allocator) are never
available. ``set_per_process_memory_fraction`` limits ``reserved`` as the allocator does.

Not modelled: streams (every block is on the default stream, so ``active`` = ``allocated``),
CUDA graphs' private pools, expandable segments, ``max_split_size_mb``/``roundup_power2_divisions``
and the garbage-collection threshold of ``PYTORCH_CUDA_ALLOC_CONF``, and memory other processes
hold on the same GPU (each process counts its own).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

# c10/cuda/CUDACachingAllocator.cpp / c10/core/AllocatorConfig.h (torch 2.x)
K_MIN_BLOCK_SIZE = 512  # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1_048_576  # largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2_097_152  # "small" allocations are packed in 2 MiB blocks
K_LARGE_BUFFER = 20_971_520  # "large" allocations may be packed in 20 MiB blocks
K_MIN_LARGE_ALLOC = 10_485_760  # allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2_097_152  # round up large allocations to 2 MiB

MIB = 1 << 20
GIB = 1 << 30
#: Estimated device memory a process holds outside the caching allocator once CUDA is initialised
#: (the context, with CUDA 12's lazy module loading, and torch's kernels): an estimate, not a
#: measurement of any one GPU; real values are a few hundred MiB and vary by GPU, driver and torch.
CUDA_CONTEXT_BYTES = 300 * MIB


def round_size(size: int) -> int:
    """``round_size``: bytes a request of ``size`` takes (multiples of 512, at least 512)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def is_small(size: int) -> bool:
    """Whether a rounded request comes from the small pool (``get_pool``)."""
    return size <= K_SMALL_SIZE


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment a rounded request makes when no cached block fits."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


def should_split(block_size: int, size: int, small: bool) -> bool:
    """``should_split`` with the default (unlimited) ``max_split_size``."""
    remaining = block_size - size
    return remaining >= K_MIN_BLOCK_SIZE if small else remaining > K_SMALL_SIZE


def format_size(size: int) -> str:
    """c10's ``format_size``: "512 bytes", "1.50 KiB", "20.00 MiB", "14.75 GiB"."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1_048_576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1_073_741_824:
        return f"{size / 1_048_576.0:.2f} MiB"
    return f"{size / 1_073_741_824.0:.2f} GiB"


def oom_message(*, device: int, alloc_size: int, total: int, free: int, in_use: int, allocated: int,
                reserved: int, allowed: int | None = None) -> str:
    """CUDA's out-of-memory text (``DeviceCachingAllocator::malloc``, torch 2.x), with the
    process-memory sentence NVML gives (``reportProcessMemoryInfo``: ``in_use`` bytes)."""
    allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
    return (f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. GPU {device} has a total capacity "
            f"of {format_size(total)} of which {format_size(free)} is free. Including non-PyTorch memory, this "
            f"process has {format_size(in_use)} memory in use. {allowed_info}Of the allocated memory "
            f"{format_size(allocated)} is allocated by PyTorch, and {format_size(reserved - allocated)} is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


class Block:
    """A piece of a segment: in use (``allocated``) or cached in its pool's free list."""

    __slots__ = ("addr", "allocated", "next", "prev", "requested", "size", "small")

    def __init__(self, size: int, addr: int, small: bool) -> None:
        self.size = size
        self.addr = addr
        self.small = small
        self.allocated = False
        self.requested = 0
        self.prev: Block | None = None
        self.next: Block | None = None

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class Stat:
    """One of the allocator's counters: ``current``, ``peak``, ``allocated``, ``freed``."""

    __slots__ = ("allocated", "current", "freed", "peak")

    def __init__(self) -> None:
        self.current = self.peak = self.allocated = self.freed = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        self.allocated += amount
        if self.current > self.peak:
            self.peak = self.current

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount


#: The counters ``torch.cuda.memory_stats()`` reports per pool ("all", "small_pool", "large_pool").
STAT_NAMES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
              "active_bytes", "inactive_split_bytes", "requested_bytes")
POOLS = ("all", "small_pool", "large_pool")


class DeviceAllocator:
    """The caching allocator of one emulated GPU (see the module docstring)."""

    def __init__(self, device: int, capacity: int, *, context: int = CUDA_CONTEXT_BYTES,
                 error: Callable[[str], BaseException] = MemoryError) -> None:
        self.device = device
        self.capacity = capacity
        self.context = context if capacity > context else 0
        self.error = error
        self.fraction: float | None = None
        self.stats = {(name, pool): Stat() for name in STAT_NAMES for pool in POOLS}
        #: ``active``/``active_bytes`` are the same Stat objects as ``allocation``/``allocated_bytes``:
        #: with one stream, a block is active exactly while it is allocated.
        for pool in POOLS:
            self.stats[("active", pool)] = self.stats[("allocation", pool)]
            self.stats[("active_bytes", pool)] = self.stats[("allocated_bytes", pool)]
        #: What every malloc and free updates: (allocation, allocated_bytes, requested_bytes) of all
        #: pools and of each pool (key: small).
        self._hot_all = self._hot_stats("all")
        self._hot = {True: self._hot_stats("small_pool"), False: self._hot_stats("large_pool")}
        self._pairs = {name: {small: (self.stats[(name, "all")], self.stats[(name, pool)])
                              for small, pool in ((True, "small_pool"), (False, "large_pool"))}
                       for name in STAT_NAMES}
        self.num_ooms = 0
        self.num_alloc_retries = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # (size, addr), sorted
        self._free_blocks: dict[int, Block] = {}  # addr -> cached block
        self._addresses = itertools.count(1 << 40, 1 << 36)  # one address range per segment

    def _hot_stats(self, pool: str) -> tuple[Stat, Stat, Stat]:
        return (self.stats[("allocation", pool)], self.stats[("allocated_bytes", pool)],
                self.stats[("requested_bytes", pool)])

    # -- what the torch.cuda API reads --------------------------------------------------------
    def stat(self, name: str, pool: str = "all") -> Stat:
        return self.stats[(name, pool)]

    @property
    def allocated(self) -> int:
        return self.stats[("allocated_bytes", "all")].current

    @property
    def reserved(self) -> int:
        return self.stats[("reserved_bytes", "all")].current

    @property
    def allowed(self) -> int | None:
        """``set_per_process_memory_fraction``'s limit in bytes, if one was set."""
        return None if self.fraction is None else int(self.fraction * self.capacity)

    @property
    def device_free(self) -> int:
        """What ``cudaMemGetInfo`` would call free: capacity less the context and what is reserved."""
        return max(0, self.capacity - self.context - self.reserved)

    def _update(self, name: str, small: bool, amount: int) -> None:
        for stat in self._pairs[name][small]:
            if amount >= 0:
                stat.increase(amount)
            else:
                stat.decrease(-amount)

    # -- the free lists -----------------------------------------------------------------------
    def _cache(self, block: Block) -> None:
        bisect.insort(self._free[block.small], (block.size, block.addr))
        self._free_blocks[block.addr] = block

    def _uncache(self, block: Block) -> None:
        entries = self._free[block.small]
        del entries[bisect.bisect_left(entries, (block.size, block.addr))]
        del self._free_blocks[block.addr]

    def _best_fit(self, size: int, small: bool) -> Block | None:
        entries = self._free[small]
        i = bisect.bisect_left(entries, (size, -1))
        if i == len(entries):
            return None
        block = self._free_blocks[entries[i][1]]
        self._uncache(block)
        return block

    # -- segments -----------------------------------------------------------------------------
    def _room_for(self, alloc: int) -> bool:
        allowed = self.allowed
        if allowed is not None and self.reserved + alloc > allowed:
            return False
        return alloc <= self.device_free

    def _new_segment(self, alloc: int, small: bool) -> Block | None:
        if not self._room_for(alloc):
            return None
        block = Block(alloc, next(self._addresses), small)
        self._update("reserved_bytes", small, alloc)
        self._update("segment", small, 1)
        self.num_device_alloc += 1
        return block

    def release_cached(self) -> bool:
        """``release_cached_blocks``/``empty_cache()``: give every cached segment that has no block
        in use back to the device. True when something was released."""
        released = False
        for small in (True, False):
            for _size, addr in list(self._free[small]):
                block = self._free_blocks[addr]
                if not block.is_split:
                    self._uncache(block)
                    self._update("reserved_bytes", small, -block.size)
                    self._update("segment", small, -1)
                    self.num_device_free += 1
                    released = True
        return released

    # -- malloc and free ----------------------------------------------------------------------
    def malloc(self, nbytes: int) -> Block:
        """A block for a storage of ``nbytes`` (> 0); raises ``self.error`` (CUDA's OOM) when the
        device cannot hold it after the cached segments are released."""
        size = round_size(nbytes)
        small = is_small(size)
        alloc = allocation_size(size)
        block = self._best_fit(size, small)
        if block is None:
            block = self._new_segment(alloc, small)
            if block is None and self.release_cached():
                self.num_alloc_retries += 1
                block = self._new_segment(alloc, small)
            if block is None:
                self.num_ooms += 1
                raise self.error(oom_message(
                    device=self.device, alloc_size=alloc, total=self.capacity, free=self.device_free,
                    in_use=self.reserved + self.context, allocated=self.allocated, reserved=self.reserved,
                    allowed=self.allowed))
        was_split = block.is_split
        if should_split(block.size, size, small):
            rest = Block(block.size - size, block.addr + size, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._cache(rest)
            if was_split:
                self._update("inactive_split_bytes", small, -size)
            else:
                self._update("inactive_split_bytes", small, rest.size)
                self._update("inactive_split", small, 1)
        elif was_split:
            self._update("inactive_split_bytes", small, -block.size)
            self._update("inactive_split", small, -1)
        block.allocated = True
        block.requested = nbytes
        for stats in self._hot_all, self._hot[small]:
            stats[0].increase(1)
            stats[1].increase(block.size)
            stats[2].increase(nbytes)
        return block

    def free(self, block: Block) -> None:
        """Return ``block`` to its pool (merged with free neighbours); the segment stays reserved."""
        if not block.allocated:
            return
        block.allocated = False
        small = block.small
        for stats in self._hot_all, self._hot[small]:
            stats[0].decrease(1)
            stats[1].decrease(block.size)
            stats[2].decrease(block.requested)
        split_blocks, split_bytes = 0, 0
        for neighbour in (block.prev, block.next):
            if neighbour is None or neighbour.allocated:
                continue
            self._uncache(neighbour)
            split_blocks -= 1
            split_bytes -= neighbour.size
            if neighbour is block.prev:
                block.addr = neighbour.addr
                block.prev = neighbour.prev
                if block.prev is not None:
                    block.prev.next = block
            else:
                block.next = neighbour.next
                if block.next is not None:
                    block.next.prev = block
            block.size += neighbour.size
        if block.is_split:
            split_blocks += 1
            split_bytes += block.size
        self._update("inactive_split", small, split_blocks)
        self._update("inactive_split_bytes", small, split_bytes)
        self._cache(block)

    def reset_peaks(self) -> None:
        """``reset_peak_memory_stats``: every peak becomes its current value."""
        for stat in self.stats.values():
            stat.peak = stat.current

    def reset_accumulated(self) -> None:
        """``reset_accumulated_memory_stats``."""
        for stat in self.stats.values():
            stat.allocated = stat.freed = 0
        self.num_ooms = self.num_alloc_retries = self.num_device_alloc = self.num_device_free = 0

    def memory_stats(self) -> dict[str, int]:
        """``torch.cuda.memory_stats()``'s flat dictionary (the keys a CUDA build reports)."""
        out: dict[str, int] = {}
        for (name, pool), stat in self.stats.items():
            for field in ("current", "peak", "allocated", "freed"):
                out[f"{name}.{pool}.{field}"] = getattr(stat, field)
        out.update({"num_ooms": self.num_ooms, "num_alloc_retries": self.num_alloc_retries,
                    "num_sync_all_streams": 0, "num_device_alloc": self.num_device_alloc,
                    "num_device_free": self.num_device_free, "max_split_size": -1,
                    "oversize_allocations.current": 0, "oversize_allocations.peak": 0,
                    "oversize_allocations.allocated": 0, "oversize_allocations.freed": 0,
                    "oversize_segments.current": 0, "oversize_segments.peak": 0,
                    "oversize_segments.allocated": 0, "oversize_segments.freed": 0})
        return dict(sorted(out.items()))
