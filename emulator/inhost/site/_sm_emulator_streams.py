"""CUDA streams, events and NVTX markers on the CPU (emulated GPUs).

Applied by ``_sm_emulator_torch`` (after ``torch.cuda``'s own patches) when ``EMULATOR_GPU_COUNT``
> 0. Every operation of an emulated GPU runs synchronously on the CPU, so by the time Python gets
control back everything queued on any stream has finished. Streams and events behave accordingly:

Emulated:

- ``torch.cuda.Stream(device=None, priority=0)``: a stream of an emulated device (index checked
  like ``set_device``), with ``device``, ``device_index``, ``stream_id``, ``cuda_stream`` (0 for
  the default stream, a distinct small integer otherwise; not a pointer), ``priority`` clamped to
  torch's range as on current GPUs (``Stream.priority_range()`` is ``(0, -3)``: 0 lowest, -3
  highest), ``wait_event``, ``wait_stream``, ``record_event``, ``query()`` (always True),
  ``synchronize()`` (returns at once), ``with stream:``. It is a ``torch.Stream`` (of the CPU
  device underneath, which has no streams of its own; the Python properties report CUDA).
- ``torch.cuda.current_stream``/``default_stream``/``set_stream`` and ``torch.cuda.stream(s)``
  (torch's own ``StreamContext``, unpatched, over these): the current stream is tracked per thread
  and device, as CUDA does.
- ``Tensor.record_stream(stream)``: does nothing (the tensor's memory is the CPU allocator's; there
  is no later reuse on another stream to guard against).
- ``torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False, external=False)``:
  ``record(stream=None)`` takes a monotonic wall-clock stamp (``time.perf_counter_ns``), which on
  the CPU is after all the work queued before it; ``elapsed_time(end)`` is the milliseconds
  between two recorded stamps (float); ``query()`` is True and ``synchronize()``/``wait()`` return
  at once. As in CUDA, ``elapsed_time`` fails unless both events were created with
  ``enable_timing=True`` and both were recorded.
- ``torch.cuda.nvtx``: ``range_push``/``range_pop``/``range``/``mark``/``range_start``/
  ``range_end`` draw nothing (there is no Nsight here). Without a tool attached NVTX returns
  ``-2`` (``NVTX_NO_PUSH_POP_TRACKING``) from push and pop and ``0`` from ``range_start``; so do
  these. While a ``torch.profiler``/``torch.autograd.profiler`` profile is recording, each range
  is also a CPU-side ``record_function`` of the same name (a mark is an empty one), so the ranges
  show up in the profile's trace and ``key_averages()``.

Not emulated: overlap (there is no concurrency between streams: timings measure the CPU doing all
of it in order), ``Event.ipc_handle``/``Event.from_ipc_handle`` (``not emulated``), external
streams, stream capture (CUDA graphs).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import _sm_emulator_cuda as cuda_emu
import _sm_emulator_patches as patches
from _sm_emulator_log import log_once

#: torch's stream priorities on current GPUs: CUDA reports (0, -5), torch caps it at
#: ``max_compile_time_stream_priorities`` (4 levels): 0 is the lowest, -3 the highest.
PRIORITY_RANGE = (0, -3)
#: What NVTX returns from push/pop when no tool (Nsight) is attached.
NVTX_NO_PUSH_POP_TRACKING = -2
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA, as torch.cuda.Stream.device_type reports it


class _Current(threading.local):
    """Per thread: the current stream of each emulated device, and the NVTX push/pop stack."""

    def __init__(self) -> None:
        self.streams: dict[int, Any] = {}
        self.nvtx: list[Any] = []


_CURRENT = _Current()
_DEFAULT: dict[int, Any] = {}
_IDS = itertools.count(1)
_RANGES: dict[int, Any] = {}  # range_start id -> open record_function (profiler active)
_RANGE_IDS = itertools.count(1)
_RANGES_LOCK = threading.Lock()


def _device_index(device: Any) -> int:
    """The emulated device ``device`` names (None/negative: the current one), index checked."""
    if device is None or (isinstance(device, int) and device < 0):
        return cuda_emu._State.current
    index = cuda_emu._index(device)
    if index is None:
        raise ValueError(f"Expected a cuda device, but got: {device}")
    cuda_emu._check(index)
    return index


def _streambase(original: Any) -> tuple[type, ...]:
    """The original's abstract bases from ``torch._streambase`` (torch 2.1 to 2.3: ``torch._dynamo``
    asserts at import that ``torch.cuda.Event``/``Stream`` derive from them)."""
    return tuple(b for b in getattr(original, "__mro__", ())[1:] if b.__module__ == "torch._streambase")


def make_classes(torch: Any) -> tuple[type, type]:
    """``(Stream, Event)`` stand-ins for ``torch.cuda`` (see the module docstring)."""
    stream_base: tuple[type, ...] = (torch.Stream,) if isinstance(getattr(torch, "Stream", None), type) else ()
    stream_bases = stream_base + tuple(b for b in _streambase(torch.cuda.Stream) if b not in stream_base)

    def stream_new(cls: type, device: Any = None, priority: int = 0, **kwargs: Any) -> Any:
        if stream_base:
            return stream_base[0].__new__(cls, "cpu")  # type: ignore[call-overload]
        return object.__new__(cls)

    def stream_init(self: Any, device: Any = None, priority: int = 0, *, _default: bool = False,
                    **kwargs: Any) -> None:
        if "stream_ptr" in kwargs:
            raise cuda_emu.not_emulated("torch.cuda.Stream(stream_ptr=...)")
        self._index = _device_index(device)
        least, greatest = PRIORITY_RANGE
        self._priority = min(least, max(greatest, int(priority)))
        self._id = 0 if _default else next(_IDS)
        log_once("cuda-streams", "torch.cuda streams and events: all work runs synchronously on the CPU")

    def stream_enter(self: Any) -> Any:
        self._previous = current_stream(self._index)
        set_stream(self)
        return self

    def stream_exit(self: Any, *exc: object) -> None:
        set_stream(self._previous)

    def record_event(self: Any, event: Any = None) -> Any:
        if event is None:
            event = Event()
        event.record(self)
        return event

    def stream_eq(self: Any, other: object) -> bool:
        return isinstance(other, Stream) and (other._index, other._id) == (self._index, self._id)

    stream_namespace: dict[str, Any] = {
        "__doc__": "torch.cuda.Stream of an emulated GPU: all work on it has already run on the CPU.",
        "__module__": "torch.cuda.streams",
        "__new__": stream_new,
        "__init__": stream_init,
        "__enter__": stream_enter,
        "__exit__": stream_exit,
        "__eq__": stream_eq,
        "__ne__": lambda self, other: not stream_eq(self, other),  # torch.Stream's own compares the CPU stream
        "__hash__": lambda self: hash((self._id, self._index)),
        "__repr__": lambda self: f"<torch.cuda.Stream device=cuda:{self._index} cuda_stream={self._id:#x}>",
        "__cuda_stream__": lambda self: (0, self._id),
        "device": property(lambda self: torch.device("cuda", self._index)),
        "device_index": property(lambda self: self._index),
        "device_type": property(lambda self: _CUDA_DEVICE_TYPE),
        "stream_id": property(lambda self: self._id),
        "cuda_stream": property(lambda self: self._id),
        "priority": property(lambda self: self._priority),
        "priority_range": staticmethod(lambda: PRIORITY_RANGE),
        "wait_event": lambda self, event: event.wait(self),
        "wait_stream": lambda self, stream: self.wait_event(stream.record_event()),
        "record_event": record_event,
        "query": lambda self: True,
        "synchronize": lambda self: None,
    }
    Stream = type("Stream", stream_bases, stream_namespace)
    Stream.__abstractmethods__ = frozenset()  # type: ignore[attr-defined]  # all implemented above
    Stream.__qualname__ = "Stream"

    class Event(*_streambase(torch.cuda.Event)):  # type: ignore[misc]
        """torch.cuda.Event of an emulated GPU: ``record`` takes a wall-clock stamp."""

        __module__ = "torch.cuda.streams"

        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                     external: bool = False) -> None:
            self.enable_timing = bool(enable_timing)
            self.blocking, self.interprocess, self.external = blocking, interprocess, external
            self._stamp_ns: int | None = None
            self._index: int | None = None

        @classmethod
        def from_ipc_handle(cls, device: Any, handle: Any) -> Any:
            raise cuda_emu.not_emulated("torch.cuda.Event.from_ipc_handle")

        def ipc_handle(self) -> Any:
            raise cuda_emu.not_emulated("torch.cuda.Event.ipc_handle")

        def record(self, stream: Any = None) -> None:
            """Stamp the time: every operation queued before this call has already run."""
            if stream is None:
                stream = current_stream()
            index = getattr(stream, "device_index", None)
            if self._index is not None and index is not None and index != self._index:
                raise RuntimeError(f"Event device index {self._index} does not match recording stream's "
                                   f"device index {index}.")
            self._index = index if index is not None else cuda_emu._State.current
            self._stamp_ns = time.perf_counter_ns()

        def wait(self, stream: Any = None) -> None:
            return None

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

        def elapsed_time(self, end_event: Any) -> float:
            """Milliseconds from this event's record to ``end_event``'s."""
            if not (self.enable_timing and getattr(end_event, "enable_timing", False)):
                raise ValueError("Both events must be created with argument 'enable_timing=True'.")
            if self._stamp_ns is None or end_event._stamp_ns is None:
                raise ValueError("Both events must be recorded before calculating elapsed time.")
            return (end_event._stamp_ns - self._stamp_ns) / 1e6

        @property
        def cuda_event(self) -> int:
            return 0 if self._stamp_ns is None else id(self)

        @property
        def device(self) -> Any:
            return None if self._index is None else torch.device("cuda", self._index)

        def __repr__(self) -> str:
            return "<torch.cuda.Event uninitialized>" if self._stamp_ns is None else \
                f"<torch.cuda.Event {self.cuda_event:#x}>"

    Event.__abstractmethods__ = frozenset()  # type: ignore[attr-defined]
    return Stream, Event


Stream: Any = None
Event: Any = None


def default_stream(device: Any = None) -> Any:
    """The default stream of an emulated device (one per device, ``stream_id`` 0)."""
    index = _device_index(device)
    if index not in _DEFAULT:
        _DEFAULT[index] = Stream(index, _default=True)
    return _DEFAULT[index]


def current_stream(device: Any = None) -> Any:
    """This thread's current stream of an emulated device (its default stream until set)."""
    index = _device_index(device)
    return _CURRENT.streams.get(index) or default_stream(index)


def set_stream(stream: Any) -> None:
    """Make ``stream`` its device's current stream in this thread (None: nothing)."""
    if stream is None:
        return
    if not isinstance(stream, Stream):
        raise cuda_emu.not_emulated(f"torch.cuda.set_stream({type(stream).__name__})")
    _CURRENT.streams[stream.device_index] = stream


def record_stream(self: Any, stream: Any) -> None:
    """``Tensor.record_stream``: nothing to record, the tensor lives in CPU memory."""
    return None


# -- NVTX --------------------------------------------------------------------------------------
def _profiling(torch: Any) -> bool:
    enabled = getattr(getattr(getattr(torch, "_C", None), "_autograd", None), "_profiler_enabled", None)
    enabled = enabled or getattr(torch.autograd, "_profiler_enabled", None)
    return bool(enabled and enabled())


def make_nvtx(torch: Any) -> dict[str, Any]:
    """The ``torch.cuda.nvtx`` stand-ins (see the module docstring)."""

    def open_record(msg: str) -> Any:
        record = torch.autograd.profiler.record_function(str(msg))
        record.__enter__()
        return record

    def range_push(msg: str) -> int:
        _CURRENT.nvtx.append(open_record(msg) if _profiling(torch) else None)
        return NVTX_NO_PUSH_POP_TRACKING

    def range_pop() -> int:
        if _CURRENT.nvtx:
            record = _CURRENT.nvtx.pop()
            if record is not None:
                record.__exit__(None, None, None)
        return NVTX_NO_PUSH_POP_TRACKING

    def range_start(msg: str) -> int:
        if not _profiling(torch):
            return 0
        with _RANGES_LOCK:
            handle = next(_RANGE_IDS)
            _RANGES[handle] = open_record(msg)
        return handle

    def range_end(range_id: int) -> None:
        with _RANGES_LOCK:
            record = _RANGES.pop(range_id, None)
        if record is not None:
            record.__exit__(None, None, None)

    def mark(msg: str) -> None:
        if _profiling(torch):
            open_record(msg).__exit__(None, None, None)

    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
        range_push(msg.format(*args, **kwargs))
        try:
            yield
        finally:
            range_pop()

    return {"range_push": range_push, "range_pop": range_pop, "range_start": range_start,
            "range_end": range_end, "mark": mark, "range": range}


def patch(torch: Any) -> None:
    """Install the stream, event and NVTX stand-ins (called by ``_sm_emulator_torch``)."""
    global Stream, Event
    Stream, Event = make_classes(torch)
    for name, value in (("Stream", Stream), ("Event", Event), ("current_stream", current_stream),
                        ("default_stream", default_stream), ("set_stream", set_stream)):
        patches.replace("cuda-streams", torch.cuda, name, value)
    patches.replace("cuda-streams", torch, "Tensor.record_stream", record_stream)
    import torch.cuda.nvtx as nvtx

    for name, value in make_nvtx(torch).items():
        patches.replace("cuda-nvtx", nvtx, name, value)
