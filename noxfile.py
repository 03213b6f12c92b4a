"""Sessions: tests (default), emulate, lint, image, bench. Each installs, then calls commands."""

from __future__ import annotations

import sys

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

CONSTRAINTS = ("-c", "constraints.txt")
EXTRAS = ".[torch,docker,sdk,test,examples]"


def _install(session: nox.Session, *extra: str) -> None:
    session.install(*CONSTRAINTS, "torch==2.13.0")
    session.install(*CONSTRAINTS, "-e", EXTRAS, *extra)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (process backend, docker backend where an engine runs)."""
    _install(session)
    session.run("python", "-m", "pytest", *(session.posargs or ["-n", "2", "-q", "-ra"]))


@nox.session
def emulate(session: nox.Session) -> None:
    """Run the example scenarios on 2 emulated hosts x 2 GPUs and print the table."""
    _install(session)
    session.run("python", "-m", "examples.run_matrix", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    _install(session, "ruff", "mypy")
    session.run("ruff", "check", "emulator", "fixtures", "tests", "noxfile.py")
    session.run("mypy", "emulator", "fixtures")


@nox.session(python=False, default=False)
def image(session: nox.Session) -> None:
    """Build the docker base (debootstrap) and the emulator image (`-- --framework 1.12`: a DLC
    family's image); skipped when inputs are unchanged."""
    session.run(sys.executable, "docker/build.py", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: overhead against hand-rolled torchrun, scaling, docker; writes bench-results/."""
    _install(session, "matplotlib")
    session.run("python", "-m", "benchmarks.run", *session.posargs)
