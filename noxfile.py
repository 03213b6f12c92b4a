"""Sessions: tests (default), unit, tests_sdk3, families, emulate, emulate_sdk3, lint, docs, image, bench,
flakes."""

from __future__ import annotations

import glob
import hashlib
import sys
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

#: ``--no-compile``: pip would byte-compile every file it installs (torch's thousands) up front; Python
#: compiles what a test imports on first use instead. Measured here: torch 27 s -> 11 s, the SDK v3
#: extras 180 s -> 135 s, per fresh environment (each CI run on a clean clone makes two).
PIP = ("--no-compile",)
CONSTRAINTS = ("-c", "constraints.txt")
EXTRAS = ".[torch,docker,sdk,test,examples,plot]"
#: SageMaker Python SDK v3 (ModelTrainer) replaces v2 in its own environment: both install `sagemaker`.
CONSTRAINTS_SDK3 = ("-c", "constraints-sdk3.txt")
EXTRAS_SDK3 = ".[torch,docker,sdk3,test,examples,plot]"
#: The tests that need SDK v3 (the v2 session skips them: its `sagemaker` is 2.x).
SDK3_TESTS = "tests/*/test_sdk3*.py"
#: The SDK v3 example launchers (run unchanged through `python -m emulator launch`).
SDK3_EXAMPLES = (("examples/torch_ddp/launch_v3.py", "--distributed", "torchrun"),
                 ("examples/torch_ddp/launch_v3.py", "--distributed", "mpi"),
                 ("examples/mnist_lightning/launch_v3.py",))


#: Written into a session's environment after its installs: what they installed from. A reused
#: environment whose stamp matches skips pip (two resolutions, about 6 s of `nox -s unit`'s minute).
STAMP = ".emulator-installed"


def _install_key(*args: str) -> str:
    """What an environment's installs depend on: pip's arguments, the files they name, the Python."""
    digest = hashlib.sha256(" ".join((sys.version, *args)).encode())
    for name in ("pyproject.toml", *(a for a in args if Path(a).is_file())):
        digest.update(Path(name).read_bytes())
    return digest.hexdigest()


def _install(session: nox.Session, *extra: str, constraints: tuple[str, ...] = CONSTRAINTS,
             extras: str = EXTRAS) -> None:
    """Install torch, then the emulator (editable) with ``extras``, unless the environment was
    reused and its stamp says it holds exactly that: a changed ``pyproject.toml``, constraints
    file, argument or Python changes the key, and a recreated environment has no stamp."""
    torch_args, args = (*PIP, *constraints, "torch==2.13.0"), (*PIP, *constraints, "-e", extras, *extra)
    stamp, key = Path(session.virtualenv.location, STAMP), _install_key(*torch_args, *args)
    if stamp.is_file() and stamp.read_text() == key:
        session.log(f"installs skipped: {stamp} says this environment has them (delete it to reinstall)")
        return
    session.install(*torch_args)
    session.install(*args)
    stamp.write_text(key)


def _install_sdk3(session: nox.Session, *extra: str) -> None:
    _install(session, *extra, constraints=CONSTRAINTS_SDK3, extras=EXTRAS_SDK3)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (process backend, docker backend where an engine runs).

    Default: 3 workers (on 2 cores: with 2 the CPUs were 85 % busy, the rest jobs' waits; 3 kept them
    95 to 98 % busy; times in the README, "Checking a fresh machine"), modules that share one
    expensive fixture on one worker (``xdist_group``),
    the example-matrix scenarios ``nox -s emulate`` runs left out (``-m matrix`` runs them), and
    the 30 slowest tests listed at the end (where the suite's time goes), and those over the 120-s
    budget per test (listed, not failed: on a shared machine a timed check is a flake; add
    ``--test-budget-strict`` on a dedicated runner)."""
    _install(session)
    session.run("python", "-m", "tests.warm")  # the default world's framework layers, with progress
    session.run("python", "-m", "pytest",
                *(session.posargs or ["-n", "3", "--dist", "loadgroup", "-m", "not matrix and not families",
                                      "-q", "-ra", "--durations=30", "--test-budget=120"]))


@nox.session(default=False)
def unit(session: nox.Session) -> None:
    """The loop to run while editing: tests/unit (no host started, no engine; under a minute on 2 cores).

    Python writes the bytecode of what the tests import (an empty ``PYTHONDONTWRITEBYTECODE`` is
    unset; the environment is installed ``--no-compile``), so runs after the first skip compiling
    it: 52 s -> 46 s of pytest on this machine's 2 cores."""
    _install(session)
    session.env["PYTHONDONTWRITEBYTECODE"] = ""
    session.run("python", "-m", "pytest", *(session.posargs or ["-n", "2", "-q", "-ra", "tests/unit"]))


@nox.session
def families(session: nox.Session) -> None:
    """A 2-host smoke test per framework family on the process backend (tests/jobs/test_families.py).

    Each family installs its DLC's torch from PyPI into its framework layer, once per machine: a
    CUDA build with its nvidia-* wheels (torch 2.2.0: 2.8 GB to download, 4.9 GB on disk), so it is
    not part of ``tests``. ``EMULATOR_TEST_FAMILIES=all`` (or ``2.1,2.3``) selects other families."""
    _install(session)
    session.run("python", "-m", "pytest", *(session.posargs or ["-m", "families", "-q", "-ra",
                                                                "tests/jobs/test_families.py"]))


@nox.session(default=False)
def flakes(session: nox.Session) -> None:
    """Run the tests that start real jobs under load until each passed 3 times (``tests/flakes.py``)."""
    _install(session)
    session.run("python", "-m", "tests.flakes", *session.posargs)


@nox.session
def tests_sdk3(session: nox.Session) -> None:
    """Run the SageMaker SDK v3 (ModelTrainer) tests in an environment with sagemaker 3.x."""
    _install_sdk3(session)
    # 3 workers on 2 cores, as the suite: its jobs wait as much as they compute (measured for its 35
    # tests: 219 s on one worker -> 135 s on two; on the idle machine 148 s on two -> 118 s on three).
    session.run("python", "-m", "pytest", *(session.posargs or ["-n", "3", "--dist", "loadgroup", "-q", "-ra",
                                                                *sorted(glob.glob(SDK3_TESTS))]))


@nox.session
def emulate(session: nox.Session) -> None:
    """Run the example scenarios on 2 emulated hosts x 2 GPUs and print the table."""
    _install(session)
    session.run("python", "-m", "examples.run_matrix", *session.posargs)


@nox.session(default=False)
def emulate_sdk3(session: nox.Session) -> None:
    """Run the SDK v3 example launchers on 2 emulated hosts x 2 GPUs (python -m emulator launch)."""
    _install_sdk3(session)
    for launcher in SDK3_EXAMPLES:
        # Unchanged, with the DLC image they name (2.5.1: its torch in a job environment).
        session.run("python", "-m", "emulator", "launch", *launcher, *session.posargs,
                    env={"SAGEMAKER_EMULATOR_GPUS_PER_HOST": "2"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy."""
    _install(session, "ruff", "mypy")
    session.run("ruff", "check", "emulator", "fixtures", "tests", "noxfile.py")
    session.run("mypy", "emulator", "fixtures")


#: The documentation site's tools (``mkdocs.yml``), pinned: a new release may warn where this one
#: did not, and ``--strict`` makes every warning an error.
DOCS_TOOLS = ("mkdocs==1.6.1", "mkdocs-material==9.8.2")


@nox.session(default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation site (``docs/``, ``mkdocs.yml``) with warnings as errors: a broken
    link or anchor, a page missing from the nav or a nav entry without its page fails. The site
    goes to ``site/`` (ignored by git). Its own environment holds only the tools, installed once
    (the same stamp as ``_install``'s), so a reused one builds in seconds."""
    stamp, key = Path(session.virtualenv.location, STAMP), _install_key(*PIP, *DOCS_TOOLS)
    if not (stamp.is_file() and stamp.read_text() == key):
        session.install(*PIP, *DOCS_TOOLS)
        stamp.write_text(key)
    session.run("mkdocs", "build", "--strict", "--clean", "--site-dir", "site", *session.posargs,
                env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=False, default=False)
def image(session: nox.Session) -> None:
    """Build the docker base (debootstrap) and the default image (`-- --framework 1.12`: that family's
    GPU image; `-- --image ID`: any DLC image); skipped when inputs are unchanged."""
    session.run(sys.executable, "docker/build.py", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks: overhead against hand-rolled torchrun, scaling, docker; writes bench-results/."""
    _install(session, "matplotlib")
    session.run("python", "-m", "benchmarks.run", *session.posargs)
