"""torch's device-generic API on emulated GPUs: ``torch.accelerator`` (torch's own module over the
emulated ``torch._C`` hooks) and ``torch.get_device_module``. Expected values: the emulated host's
GPUs (2, ``EMULATOR_GPU_MEMORY`` bytes each, all free) and torch.accelerator's documented
behaviour (``device_index`` restores the previous index; streams are the current device's)."""

from __future__ import annotations

from typing import Any

ACCELERATOR_SCRIPT = """
import torch
a = torch.accelerator
say("found", a.current_accelerator(), a.current_accelerator(check_available=True), a.is_available(),
    a.device_count(), a.current_device_index())
a.set_device_index(1)
say("set", a.current_device_index(), torch.cuda.current_device())
with a.device_index(0):
    say("inside", a.current_device_index())
say("after", a.current_device_index())
a.set_device_index("cuda:0")
s = torch.cuda.Stream()
a.set_stream(s)
say("stream", a.current_stream() is s, torch.cuda.current_stream() is s)
a.synchronize()
a.empty_cache(); a.empty_host_cache(); a.reset_peak_memory_stats()
say("memory", a.get_memory_info(), a.memory_allocated(), a.max_memory_allocated(), len(a.memory_stats()))
say("dtypes", {torch.float16, torch.bfloat16, torch.float32} <= a.get_device_capability()["supported_dtypes"])
module = torch.get_device_module
say("module", module("cuda") is torch.cuda, module(torch.device("cuda", 1)) is torch.cuda)
try:
    a.set_device_index(2)
except RuntimeError as error:
    say("ordinal", "invalid device ordinal" in str(error))
"""


def test_torch_accelerator_reports_the_emulated_gpus(run_script: Any) -> None:
    out = run_script(ACCELERATOR_SCRIPT, EMULATOR_GPU_MEMORY="1000").ok()
    assert "found cuda cuda True 2 0" in out
    assert "set 1 1" in out and "inside 0" in out and "after 1" in out
    assert "stream True True" in out
    assert "memory (1000, 1000) 0 0 0" in out
    assert "dtypes True" in out and "module True True" in out
    assert "ordinal True" in out


def test_without_gpus_there_is_no_accelerator(run_script: Any) -> None:
    out = run_script("import torch\nsay('none', torch.accelerator.current_accelerator(), "
                     "torch.accelerator.device_count())\n", gpus=0).ok()
    assert "none None 0" in out
