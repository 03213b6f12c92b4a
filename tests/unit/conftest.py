"""tests/unit: no test here starts a host. A backend's ``start`` raises, so a test that would start
one fails naming this folder's rule instead of slowing the unit loop down (``nox -s unit``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from emulator.backends.docker.backend import DockerBackend
    from emulator.backends.process.backend import ProcessBackend

    def refuse(self: Any, spec: Any) -> Any:
        raise AssertionError(f"{type(self).__name__}.start: a test in tests/unit starts no host "
                             "(move it to tests/jobs or tests/docker)")

    monkeypatch.setattr(ProcessBackend, "start", refuse)
    monkeypatch.setattr(DockerBackend, "start", refuse)
    yield
