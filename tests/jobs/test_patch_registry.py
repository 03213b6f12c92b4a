"""The patch registry (``emulator/inhost/site/_sm_emulator_patches.py``) against what is installed,
against what the in-host code really changes, and against the docs (``docs/reference/patches.md``).

- Every entry's recorded fingerprint is compared with the installed pinned package (the oracle:
  torch 2.13.0, sagemaker-training 5.1.4, pytorch-lightning 2.6.x here; pytorch-lightning 1.5.10
  in the job environment of ``examples/mnist_lightning15``, as that example builds it).
- Every attribute the in-host code changes in those packages is a registry entry, and every
  applicable entry is applied: the attributes of every patched owner are snapshotted before and
  after the in-host patch functions run, in a process of its own, and the difference must be
  exactly the registry's.
- The table in ``docs/reference/patches.md`` is the registry's (``python -m emulator.inhost.patches
  --markdown``).
- The check itself: a missing or renamed target makes a critical patch raise and a non-critical
  wrap skip, with what changed on stderr (fake modules named like the real ones).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from emulator.backends import jobenv
from emulator.inhost import SITE, SMDDP_SITE
from emulator.inhost import patches as registry
from emulator.inhost.site import _sm_emulator_hooks as hooks

ROOT = Path(__file__).resolve().parents[2]
#: The pinned distributions this environment must have, so the check below cannot pass vacuously.
PINNED_HERE = ("torch 2.13.0", "sagemaker-training 5.1.4", "sagemaker-pytorch-training 3.0.0",
               "pytorch-lightning 2.6", "python 3.11")


def test_every_entry_matches_the_installed_pinned_packages() -> None:
    bad, checked, skipped = registry.check_installed()
    assert not bad, "\n".join(bad)
    assert {p.pinned for p in checked} >= set(PINNED_HERE), skipped
    for line in skipped:  # only entries for other versions or packages absent here
        assert "not installed" in line or "entry is for" in line, line


def test_lightning15_entries_match_in_its_job_environment(tmp_path: Path) -> None:
    """Lightning 1.5.10's entries, checked where that version is installed: the job environment
    the emulator builds for ``examples/mnist_lightning15`` (its ``requirements.txt``)."""
    from examples.mnist_lightning15.repack_wheel import ensure

    ensure()  # the repacked wheel its requirements.txt names (one download, cached in the example)
    from emulator.job import dlc, frameworks

    install = frameworks.install_set(dlc.image(dlc.CURRENT_IMAGE))  # the default world's job environment
    python, prepared = jobenv.prepare(ROOT / "examples" / "mnist_lightning15", tmp_path, tmp_path / "jobenv.log",
                                      install)
    assert prepared, (tmp_path / "jobenv.log").read_text()[-3000:]
    code = ("import json; from emulator.inhost import patches as p; bad, checked, skipped = p.check_installed(); "
            "print(json.dumps([bad, [c.target for c in checked]]))")
    done = subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    bad, checked = json.loads(done.stdout.strip().splitlines()[-1])
    assert not bad
    expected = {p.target for p in registry.REGISTRY if p.pinned == "pytorch-lightning 1.5.10"}
    assert expected and expected <= set(checked)


def test_hooks_watch_the_registered_modules() -> None:
    assert set(hooks.LIGHTNING_DDP_MODULES) == {p.module for p in registry.entries("lightning-ddp")}
    assert set(hooks.TOOLKIT_SLEEP_MODULES) == {p.module for p in registry.entries("short-sleeps")}
    assert {hooks.TOOLKIT_TRAINING_MODULE} == {p.module for p in registry.entries("toolkit-torch-version")}
    assert set(hooks.FSDP_MODULES) == {p.module for p in registry.entries("cuda-fsdp")}
    # The collectives the in-host recorder wraps, read from its source (importing it needs the
    # in-host path): every one is a registry entry, in the same order.
    source = (SITE / "_sm_emulator_collectives.py").read_text()
    module = ast.parse(source)
    listed = next(ast.literal_eval(node.value) for node in module.body if isinstance(node, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "COLLECTIVES" for t in node.targets))
    assert list(listed) == [p.attribute for p in registry.entries("collectives")]


def test_the_docs_table_is_the_registry() -> None:
    """The patch table of the documentation site (``docs/reference/patches.md``), between its
    markers, is exactly what ``python -m emulator.inhost.patches --markdown`` prints."""
    page = (ROOT / "docs" / "reference" / "patches.md").read_text()
    start, end = "<!-- patch-registry: start -->\n", "<!-- patch-registry: end -->"
    assert start in page and end in page
    table = page.split(start, 1)[1].split(end, 1)[0]
    assert table == registry.markdown(), "regenerate with: python -m emulator.inhost.patches --markdown"


#: Runs the in-host patch functions in a process of its own and prints what changed.
SNAPSHOT = r'''
import importlib, json, sys
owners = json.loads(sys.argv[1])
import torch, torch.distributed, torch.utils.data.distributed
import torch.distributed.fsdp, torch.distributed.fsdp._init_utils, torch.distributed.fsdp._fully_shard._fsdp_init
import pytorch_lightning.strategies.ddp, lightning_fabric.strategies.ddp
import sagemaker_training.mpi, sagemaker_training.smdataparallel, sagemaker_pytorch_container.training

def resolve(label):
    parts = label.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise LookupError(label)

def snapshot():  # the values themselves (compared by identity), not ids that could be reused
    return {label: dict(vars(resolve(label))) for label in owners}

before = snapshot()
import _sm_emulator_torch, _sm_emulator_lightning, _sm_emulator_toolkit, _sm_emulator_patches, _sm_emulator_devices
_sm_emulator_torch.patch_torch(torch)
for name in _sm_emulator_devices.FSDP_MODULES:
    _sm_emulator_devices.patch_fsdp_module(sys.modules[name])
for module in (pytorch_lightning.strategies.ddp, lightning_fabric.strategies.ddp):
    _sm_emulator_lightning.patch_ddp_module(module)
for module in (sagemaker_training.mpi, sagemaker_training.smdataparallel):
    _sm_emulator_toolkit.patch(module)
_sm_emulator_toolkit.patch_training(sagemaker_pytorch_container.training)
import smdistributed.dataparallel.torch.torch_smddp
import _sm_emulator_collectives, _sm_emulator_exits, multiprocessing.process, threading
_sm_emulator_collectives.patch(torch)
_sm_emulator_exits._on_multiprocessing(multiprocessing.process)
_sm_emulator_exits._on_threading(threading)
after = snapshot()
missing = object()
changed = sorted([label, name] for label in owners for name in set(before[label]) | set(after[label])
                 if before[label].get(name, missing) is not after[label].get(name, missing)
                 and not name.startswith("_sm_emulator"))
print(json.dumps({"changed": changed, "applied": [[p.group, p.target] for p in _sm_emulator_patches.APPLIED]}))
'''


#: Hooks Python documents as made to be replaced, which the in-host code sets without the registry.
DOCUMENTED_HOOKS = {("threading", "excepthook")}


def test_every_patch_is_registered_and_applied(tmp_path: Path) -> None:
    installed = {"lightning": False}
    try:
        importlib.metadata.version("lightning")
        installed["lightning"] = True
    except importlib.metadata.PackageNotFoundError:
        pass
    applicable = [p for p in registry.REGISTRY
                  if p.pinned != "pytorch-lightning 1.5.10" and (installed["lightning"] or
                                                                 not p.module.startswith("lightning."))]
    expected: set[tuple[str, str]] = set()
    for p in applicable:
        *path, name = p.attribute.split(".")
        expected.add((".".join([p.module, *path]), name))
        expected.update((alias, name) for alias in p.aliases)
    # Every owner the registry names, plus owners a stray patch would most likely touch.
    owners = sorted({owner for owner, _ in expected} | {"torch.nn.Module", "torch.nn.functional",
                                                        "torch.distributed.Backend", "threading"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (SITE, SMDDP_SITE))), "EMULATOR_GPU_COUNT": "2",
           "EMULATOR_DIAG_DIR": str(tmp_path),
           # memory counting (off by default) wraps UntypedStorage.resize_: on, with a known capacity
           "EMULATOR_GPU_MEMORY": str(24 << 30), "EMULATOR_GPU_MEMORY_MODE": "count",
           "EMULATOR_SHORT_TOOLKIT_SLEEPS": "1"}
    env.pop("EMULATOR_INHOST", None)  # the patch functions are called explicitly, after the snapshot
    done = subprocess.run([sys.executable, "-c", SNAPSHOT, json.dumps(owners)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    changed = {tuple(item) for item in report["changed"]}
    changed.discard(("torch.distributed.Backend", "SMDDP"))  # torch's own register_backend("smddp"): not a patch
    # Python's documented hook for uncaught thread exceptions, made to be set (as sys.excepthook): set
    # directly by _sm_emulator_exits, not a registered patch. Seen here, so the snapshot covers threading.
    assert changed >= DOCUMENTED_HOOKS
    assert changed - DOCUMENTED_HOOKS == expected
    assert sorted(map(tuple, report["applied"])) == sorted((p.group, p.target) for p in applicable)
    assert "[emulator] patch" not in done.stderr  # nothing differs from the pinned versions


# -- the check itself, on fake modules named like the real ones ---------------------------------
def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def test_critical_target_with_a_renamed_parameter_stops_the_process(capsys: pytest.CaptureFixture[str]) -> None:
    def all_reduce(tensor: Any, operation: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    c10d = _module("torch.distributed.distributed_c10d", all_reduce=all_reduce)
    with pytest.raises(registry.PatchMismatch, match=r"parameter\(s\) op not found"):
        registry.wrap("smddp-limits", c10d, "all_reduce", lambda original: original)
    assert c10d.all_reduce is all_reduce
    err = capsys.readouterr().err
    assert "[emulator] patch torch.distributed.distributed_c10d.all_reduce [smddp-limits]" in err
    assert "this process stops" in err and "torch 2.13.0" in err
    with pytest.raises(registry.PatchMismatch, match="not found"):  # gone altogether
        registry.wrap("smddp-limits", _module("torch.distributed.distributed_c10d"), "reduce", lambda o: o)


def test_a_critical_mismatch_on_a_replaced_torch_names_the_replacement(capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's requirements.txt replaced the DLC's torch (EMULATOR_DLC_TORCH) with this one: the
    stop names that change, not only the patch internals."""
    def all_reduce(tensor: Any, operation: Any = None, group: Any = None, async_op: bool = False) -> None:
        return None

    monkeypatch.setenv("EMULATOR_DLC_TORCH", "1.12.1")
    installed = importlib.metadata.version("torch")
    c10d = _module("torch.distributed.distributed_c10d", all_reduce=all_reduce)
    expected = re.escape(f"torch {installed} runs instead of the DLC's torch 1.12.1")
    with pytest.raises(registry.TorchReplaced, match=expected):
        registry.wrap("smddp-limits", c10d, "all_reduce", lambda original: original)
    assert "requirements.txt replaced it" in capsys.readouterr().err
    monkeypatch.setenv("EMULATOR_DLC_TORCH", installed)  # the DLC's own torch: the internal mismatch as before
    with pytest.raises(registry.PatchMismatch) as caught:
        registry.wrap("smddp-limits", c10d, "all_reduce", lambda original: original)
    assert not isinstance(caught.value, registry.TorchReplaced)


def test_non_critical_problems_are_logged_and_wraps_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    sampler = _module("torch.utils.data.distributed")
    assert registry.wrap("diagnostics", sampler, "DistributedSampler.__init__", lambda o: o) is False
    assert "(not found); not patched" in capsys.readouterr().err

    def is_available(strict: bool = False) -> bool:
        return False

    cuda = _module("torch.cuda", is_available=is_available)
    assert registry.replace("cuda-devices", cuda, "is_available", "replacement") is True
    assert cuda.is_available == "replacement"
    err = capsys.readouterr().err
    assert "(expected (), found (strict=False)); patched anyway" in err


def test_unregistered_patch_is_refused() -> None:
    with pytest.raises(LookupError, match="not in the patch registry"):
        registry.replace("cuda-devices", _module("torch.cuda"), "not_a_registered_name", None)
