"""The ``ci`` profile's toolkit speed-ups, in real processes with the real toolkit.

Oracle: sagemaker-pytorch-training 3.0.0's own ``_set_torch_version_environment`` (it imports
torch and sets ``SM_DLC_TORCH_VERSION`` to ``torch.__version__``), run unpatched in a process of
its own, against the same function with ``EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT=1``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

#: Calls the toolkit's function and reports the variable and whether torch was imported.
CALL = """
import json, os, sys
import sagemaker_pytorch_container.training as training
os.environ.pop("SM_DLC_TORCH_VERSION", None)
training._set_torch_version_environment()
say("REPORT", json.dumps({"version": os.environ.get("SM_DLC_TORCH_VERSION"), "torch_imported": "torch" in sys.modules}))
"""


def _report(output: str) -> dict[str, Any]:
    return dict(json.loads(next(line for line in output.splitlines() if line.startswith("REPORT "))[7:]))


def test_the_torch_free_toolkit_sets_the_version_the_real_one_sets(run_script: Any) -> None:
    real = _report(run_script(CALL).ok())
    fast = _report(run_script(CALL, EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT="1").ok())
    assert real["torch_imported"] is True  # the oracle really imported torch
    assert fast["torch_imported"] is False
    import torch

    assert real["version"] == str(torch.__version__)
    assert fast["version"] == real["version"]


def test_without_the_switch_the_toolkit_is_unpatched(run_script: Any) -> None:
    out = run_script("import sagemaker_pytorch_container.training as t\n"
                     "say('wrapped', hasattr(t._set_torch_version_environment, '__wrapped__'))").ok()
    assert "wrapped False" in out


def _fake_torch(root: Path, version_py: str | None) -> Path:
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('this torch cannot be imported')\n")
    if version_py is not None:
        (package / "version.py").write_text(version_py)
    return root


@pytest.mark.parametrize(("version_py", "expected"), [
    ("from typing import Optional\n__version__ = '1.12.1+cu102'\ncuda: Optional[str] = '10.2'\n", "1.12.1+cu102"),
    ("__version__: str = '2.0.0'\n", "2.0.0"),
    ("__version__ = make_version()\n", None),  # not a literal: the toolkit's own function runs
    (None, None),  # no version.py
    ("__version__ = (\n", None),  # unparsable
])
def test_version_file_reading(run_script: Any, tmp_path: Path, version_py: str | None, expected: str | None) -> None:
    fake = _fake_torch(tmp_path / "fake", version_py)
    out = run_script(f"import sys; sys.path.insert(0, {str(fake)!r})\n"
                     "import _sm_emulator_toolkit\n"
                     "say('read', repr(_sm_emulator_toolkit.torch_version_from_file()))").ok()
    assert f"read {expected!r}" in out.splitlines()


def test_without_a_readable_version_the_toolkit_imports_torch_as_it_would(run_script: Any, tmp_path: Path) -> None:
    """No version.py: the toolkit's own function runs; this torch fails to import, so it warns and
    leaves the variable unset, as sagemaker-pytorch-training does."""
    fake = _fake_torch(tmp_path / "fake", None)
    result = run_script(f"import sys; sys.path.insert(0, {str(fake)!r})\n" + CALL,
                        EMULATOR_TOOLKIT_SKIPS_TORCH_IMPORT="1")
    report = _report(result.ok())
    assert report["version"] is None
    assert "PyTorch can be found, but cannot be imported" in result.stderr
