"""Exit-time teardown of an emulated nccl group, on real torchrun ranks.

Expected values from torch's ``~ProcessGroupNCCL`` (ProcessGroupNCCL.cpp): the warning is printed
once, by ranks with ``rank % local GPU count == 0``, only when the group was not destroyed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from emulator.inhost import SITE

from .conftest import Runner

sys.path.insert(0, str(SITE))
import _sm_emulator_teardown as teardown

sys.path.remove(str(SITE))

SCRIPT = """\
import os, sys
import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group(sys.argv[1] if len(sys.argv) > 1 else os.environ["ASK"])
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
say("sum", dist.get_rank(), t.item())
if os.environ.get("DESTROY") == "1":
    dist.destroy_process_group()
"""
WARNING = re.compile(r"\[rank(\d+)\]:\[W\d{4} [\d:.]+ ProcessGroupNCCL\.cpp\] Warning: "
                     + re.escape(teardown.NCCL_NOT_DESTROYED) + r" \(function operator\(\)\)")


@pytest.mark.parametrize(("ask", "destroy", "warned"), [
    ("nccl", "0", ["0"]),  # 2 ranks on 2 GPUs: rank 0 only
    ("cuda:nccl,cpu:gloo", "0", ["0"]),
    ("nccl", "1", []),  # destroyed by the script: nothing to warn about
    ("gloo", "0", []),  # the script's own gloo: gloo's behaviour, no NCCL warning
])
def test_warning_and_teardown(run_script: Runner, ask: str, destroy: str, warned: list[str]) -> None:
    result = run_script(SCRIPT, nproc=2, gpus=2, ASK=ask, DESTROY=destroy)
    if ask != "gloo":  # gloo's own teardown may abort (the known behaviour this does not change)
        out = result.ok()
        assert sorted(re.findall(r"^sum (\d) 2\.0$", out, re.M)) == ["0", "1"]
    else:  # the ranks got past all_reduce (what they print comes before any teardown abort)
        assert re.search(r"^sum \d 2\.0$", result.stdout, re.M), (result.stdout, result.stderr[-3000:])
    assert sorted(WARNING.findall(result.stderr)) == warned


def test_translated_backends() -> None:
    assert teardown.translated("nccl", "gloo") == "nccl"
    assert teardown.translated("cuda:nccl,cpu:gloo", "cuda:gloo,cpu:gloo") == "nccl"
    assert teardown.translated("smddp", "smddp") == "smddp"
    assert teardown.translated("nccl", "nccl") is None  # not translated (no emulated GPUs): torch's own nccl
    assert teardown.translated("gloo", "gloo") is None
    assert teardown.translated(None, None) is None


def test_warning_line_has_c10_shape() -> None:
    line = teardown.warning_line(4)
    found = WARNING.fullmatch(line)
    assert found is not None and found.group(1) == "4"
    assert Path(teardown.__file__).parent == Path(SITE)
