"""The site hook is cheap: nothing heavy is imported by a process that never imports torch."""

from __future__ import annotations

from typing import Any


def test_process_without_torch_does_not_import_it(run_script: Any) -> None:
    out = run_script(
        """
        import sys
        print("hooks", "_sm_emulator_hooks" in sys.modules)
        heavy = [m for m in ("torch", "numpy", "pytorch_lightning", "lightning") if m in sys.modules]
        print("heavy", heavy)
        """
    ).ok()
    assert "hooks True" in out
    assert "heavy []" in out


def test_without_flag_nothing_is_installed(run_script: Any) -> None:
    result = run_script("import sys; print('hooks', '_sm_emulator_hooks' in sys.modules)", EMULATOR_INHOST="0")
    assert "hooks False" in result.ok()
