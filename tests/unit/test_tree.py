"""The test tree shows its kinds (``docs/contributing.md``): every module sits in tests/unit, tests/jobs
or tests/docker, and a unit test cannot start a host."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import FOLDER_KINDS

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_is_in_a_kind_folder() -> None:
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 60, len(modules)  # the tree was read (about 80 modules when this was written)
    stray = [p.relative_to(TESTS).as_posix() for p in modules if p.relative_to(TESTS).parts[0] not in FOLDER_KINDS]
    assert not stray, f"move these into tests/{{{','.join(FOLDER_KINDS)}}}/: {stray}"


@pytest.mark.parametrize("backend", ["process", "docker"])
def test_a_unit_test_cannot_start_a_host(backend: str) -> None:
    """The guard of tests/unit/conftest.py is live: each backend's start refuses here."""
    if backend == "process":
        from emulator.backends.process.backend import ProcessBackend as Backend
    else:
        from emulator.backends.docker.backend import DockerBackend as Backend  # type: ignore[assignment]
    with pytest.raises(AssertionError, match="a test in tests/unit starts no host"):
        Backend.start(object.__new__(Backend), None)  # type: ignore[arg-type]


def test_the_budget_lists_only_the_tests_over_it_slowest_first() -> None:
    from ..conftest import over_budget

    seconds = {"tests/jobs/a.py::t": 130.0, "tests/jobs/b.py::t": 119.9, "tests/docker/c.py::t": 200.5}
    assert over_budget(seconds, 120) == [("tests/docker/c.py::t", 200.5), ("tests/jobs/a.py::t", 130.0)]
    assert over_budget(seconds, 300) == []
