"""Abnormal-end records on real processes, and the quiet-failure warnings made from them."""

from __future__ import annotations

import textwrap
from pathlib import Path

from emulator.diagnostics import quiet

from .conftest import PRELUDE, Runner

SCRIPT = textwrap.dedent("""\
    import multiprocessing, threading, traceback

    def worker():
        raise RuntimeError("nccl is not available on a CPU instance")  # WORKER

    def background():
        raise ValueError("uploader gave up")  # THREAD

    if __name__ == "__main__":
        try:
            raise KeyError("handled on purpose")
        except KeyError:
            traceback.print_exc()  # printed and handled: not a failure
        child = multiprocessing.get_context("spawn").Process(target=worker, name="worker-0")
        child.start()
        child.join()
        thread = threading.Thread(target=background, name="uploader")
        thread.start()
        thread.join()
        say("success file written")  # the parent never checks child.exitcode
""")


def test_dead_child_and_thread_are_recorded_but_a_handled_traceback_is_not(run_script: Runner,
                                                                          tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script(SCRIPT, EMULATOR_DIAG_DIR=str(diag))
    assert "success file written" in result.ok()
    assert "KeyError: 'handled on purpose'" in result.stderr  # the handled traceback was printed
    records = quiet.load(diag)
    assert sorted(r["kind"] for r in records) == ["child-exit", "thread"]
    child = next(r for r in records if r["kind"] == "child-exit")  # multiprocessing printed and dropped it
    assert (child["process"], child["code"]) == ("worker-0", 1)
    assert (child["exception"], child["message"]) == ("RuntimeError", "nccl is not available on a CPU instance")
    thread = next(r for r in records if r["kind"] == "thread")
    assert (thread["thread"], thread["exception"]) == ("uploader", "ValueError")
    (warning,) = quiet.warnings(records, {})
    assert "RuntimeError: nccl is not available on a CPU instance" in warning
    assert "thread 'uploader'" in warning and "multiprocessing child 'worker-0'" in warning
    assert "KeyError" not in warning


def test_uncaught_exception_in_a_plain_script(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script("def main():\n    raise SystemError('boom')\nmain()\n", EMULATOR_DIAG_DIR=str(diag))
    assert result.returncode == 1 and "SystemError: boom" in result.stderr  # the original hook still ran
    (record,) = quiet.load(diag)
    line = PRELUDE.count("\n") + 2
    assert record["kind"] == "uncaught" and record["where"].endswith(f"script.py:{line} in main")


def test_sys_exit_and_success_record_nothing(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    assert run_script("import sys\nsys.exit(0)\n", EMULATOR_DIAG_DIR=str(diag)).returncode == 0
    assert quiet.load(diag) == []


def test_a_module_the_dlc_lacks_fails_as_on_sagemaker_with_one_hint(run_script: Runner, tmp_path: Path) -> None:
    """``import lightning`` without it installed: the rank dies with ModuleNotFoundError (what
    SageMaker's DLCs do: none ships Lightning), and one ``[emulator]`` line names the module, the
    DLC and the requirements.txt fix."""
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script("import sm_emulator_no_such_package.sub\n", EMULATOR_DIAG_DIR=str(diag),
                        EMULATOR_DLC="the PyTorch 2.2.0 DLC", RANK="3")
    assert result.returncode == 1
    assert "ModuleNotFoundError: No module named 'sm_emulator_no_such_package'" in result.stderr
    hints = [line for line in result.stderr.splitlines() if line.startswith("[emulator] rank 3: No module named")]
    assert len(hints) == 1, result.stderr
    assert "the PyTorch 2.2.0 DLC does not ship it" in hints[0] and "requirements.txt" in hints[0]
    assert "pip install" not in hints[0]


def test_other_failures_get_no_package_hint(run_script: Runner, tmp_path: Path) -> None:
    diag = tmp_path / "diag"
    diag.mkdir()
    result = run_script("import os.no_such_submodule\n", EMULATOR_DIAG_DIR=str(diag))
    assert result.returncode == 1 and "ModuleNotFoundError" in result.stderr
    assert "does not ship it" not in result.stderr  # os is there; a missing submodule is not a package-set matter
