"""Run the example matrix on the emulator and print one table.

``python -m examples.run_matrix [--only NAME] [--backend process|docker] [--output-dir DIR]``

Every scenario is a real job (``emulator.run``) with the values its ``launch.py`` gives the
SageMaker SDK. A scenario passes when the job completes, rank 0's ``first_loss``/``last_loss``
lines show the loss went down, and rank 0's model is in ``model.tar.gz``. Exit status 1 if any
scenario does not pass.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from . import data

HERE = Path(__file__).resolve().parent
TORCHRUN = {"torch_distributed": {"enabled": True}}
SMDDP = {"smdistributed": {"dataparallel": {"enabled": True}}}
PYTORCHDDP = {"pytorchddp": {"enabled": True}}
LOSS_RE = re.compile(r"(?<![A-Za-z_])(first_loss|last_loss)=([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?|nan|inf)")
#: Files that count as rank 0's model in ``model.tar.gz``.
MODEL_FILES = ("model.pt", "model.safetensors", "pytorch_model.bin")


@dataclass(frozen=True)
class Scenario:
    """One job of the matrix: a source dir under ``examples/`` and the estimator's values."""

    name: str
    source: str
    distribution_label: str
    distribution: Mapping[str, Any] | None = None
    instance_type: str = "ml.p4d.24xlarge"
    instance_count: int = 2
    gpus_per_host: int | None = 2
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    lightning: str = "-"

    @property
    def source_dir(self) -> Path:
        return HERE / self.source

    @property
    def topology(self) -> str:
        return f"{self.instance_count}x{self.gpus_per_host or 0}"

    def estimator_kwargs(self) -> dict[str, Any]:
        """The keyword arguments ``emulator.run`` (and the SDK estimator) take for this job."""
        kwargs: dict[str, Any] = dict(entry_point="train.py", source_dir=str(self.source_dir),
                                      instance_type=self.instance_type,
                                      instance_count=self.instance_count,
                                      hyperparameters=dict(self.hyperparameters))
        if self.distribution:
            kwargs["distribution"] = dict(self.distribution)
        if self.gpus_per_host is not None:
            kwargs["gpus_per_host"] = self.gpus_per_host
        return kwargs


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def scenarios() -> list[Scenario]:
    """The matrix, in the order it runs."""
    pl2 = _version("pytorch-lightning")
    pl15 = "1.5.10.post0"
    return [
        Scenario("mnist_single", "mnist_single", "none", None, "ml.m5.xlarge", 1, None),
        Scenario("torch_ddp[torch_distributed]", "torch_ddp", "torch_distributed", TORCHRUN),
        Scenario("torch_ddp[pytorchddp]", "torch_ddp", "pytorchddp", PYTORCHDDP),
        Scenario("mnist_lightning[ddp]", "mnist_lightning", "torch_distributed", TORCHRUN,
                 hyperparameters={"backend": "ddp"}, lightning=pl2),
        Scenario("mnist_lightning[smddp]", "mnist_lightning", "smdistributed", SMDDP,
                 hyperparameters={"backend": "smddp"}, lightning=pl2),
        Scenario("mnist_lightning15[ddp]", "mnist_lightning15", "torch_distributed", TORCHRUN,
                 hyperparameters={"backend": "ddp"}, lightning=pl15),
        Scenario("mnist_lightning15[smddp]", "mnist_lightning15", "smdistributed", SMDDP,
                 hyperparameters={"backend": "smddp"}, lightning=pl15),
        Scenario("bert_lightning[ddp]", "bert_lightning", "torch_distributed", TORCHRUN,
                 "ml.g5.12xlarge", hyperparameters={"backend": "ddp"}, lightning=pl2),
        Scenario("bert_lightning[smddp]", "bert_lightning", "smdistributed", SMDDP,
                 hyperparameters={"backend": "smddp"}, lightning=pl2),
    ]


# -- issue 15: jobs that name a framework_version (their DLC's torch; docker backend only) ------
@dataclass(frozen=True)
class FrameworkScenario(Scenario):
    """A job on its DLC's torch and Python: always the docker backend (the framework's image,
    built on first use), with the example's own data."""

    framework_version: str = "1.12.1"
    py_version: str = "py38"
    backend: str = "docker"
    data: str = ""  #: the example's data folder under ``examples/``

    def estimator_kwargs(self) -> dict[str, Any]:
        return {**super().estimator_kwargs(), "framework_version": self.framework_version,
                "py_version": self.py_version}


def framework_scenarios() -> list[Scenario]:
    """The 2022-style example (torch 1.12.1, Lightning 1.6.3 from its requirements.txt, smddp)
    when a docker engine runs here (``main`` runs it after :func:`scenarios`; its test is
    tests/test_framework_jobs.py, through the example's own launch.py)."""
    try:
        from emulator.backends.docker import DockerBackend

        DockerBackend().check()
    except Exception:
        return []
    return [FrameworkScenario("mnist_lightning16_smddp[smddp]", "mnist_lightning16_smddp/code",
                              "smdistributed", SMDDP, hyperparameters={"epochs": 2}, lightning="1.6.3",
                              data="mnist_lightning16_smddp/data/training")]


@dataclass(frozen=True)
class Outcome:
    """What one scenario did."""

    scenario: Scenario
    status: str
    seconds: float
    first_loss: float | None
    last_loss: float | None
    model_saved: bool
    diagnostics: tuple[str, ...]
    failure_reason: str | None
    job_dir: Path | None = None

    @property
    def passed(self) -> bool:
        return (self.status == "Completed" and self.model_saved and self.first_loss is not None
                and self.last_loss is not None and self.last_loss < self.first_loss)

    @property
    def problem(self) -> str | None:
        """Why the scenario did not pass (None if it did)."""
        if self.passed:
            return None
        if self.status != "Completed":
            return f"{self.status}: {self.failure_reason}"
        if self.first_loss is None or self.last_loss is None:
            return "no first_loss/last_loss lines in algo-1's log"
        if not self.last_loss < self.first_loss:
            return f"loss did not decrease ({self.first_loss} -> {self.last_loss})"
        return "rank 0's model is missing from model.tar.gz"


def parse_losses(log: str) -> tuple[float | None, float | None]:
    """``(first_loss, last_loss)`` from a host log (None where the line is missing)."""
    found: dict[str, float] = {}
    for key, value in LOSS_RE.findall(log):
        found[key] = float(value)
    return found.get("first_loss"), found.get("last_loss")


def prepare(scenario: Scenario) -> None:
    """Anything a scenario needs before its job starts (Lightning 1.5's repacked wheel)."""
    if scenario.source == "mnist_lightning15":
        from .mnist_lightning15.repack_wheel import ensure

        ensure()


def run_one(scenario: Scenario, *, channel: Path, output: Path, backend: str = "process",
            echo: bool = False) -> Outcome:
    """Run ``scenario`` as one job and judge it."""
    import emulator
    from emulator.errors import EmulatorError

    prepare(scenario)
    if isinstance(scenario, FrameworkScenario):  # issue 15: its own backend and data
        backend, channel = scenario.backend, HERE / scenario.data
    job = re.sub(r"[^a-z0-9]+", "-", scenario.name.lower()).strip("-")
    start = time.monotonic()
    try:
        result = emulator.run(backend=backend, echo=echo, stop_grace=5,
                              channels={"training": str(channel)}, output_path=str(output),
                              job_name=f"{job}-{int(time.time())}"[:63],
                              **scenario.estimator_kwargs())
    except EmulatorError as error:
        return Outcome(scenario, "Error", time.monotonic() - start, None, None, False, (),
                       f"{type(error).__name__}: {error}")
    seconds = time.monotonic() - start
    first, last = parse_losses(result.log("algo-1"))
    files = result.model_files()
    saved = any(Path(name).name in MODEL_FILES for name in files)
    kinds = tuple(d.kind for d in result.diagnostics)
    return Outcome(scenario, result.status, seconds, first, last, saved, kinds,
                   result.failure_reason, result.job_dir)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(outcomes: Sequence[Outcome]) -> str:
    """The matrix table (``emulator.console.table``) and one line per problem."""
    from emulator.console import table

    rows = [(o.scenario.name, o.scenario.lightning, o.scenario.distribution_label,
             o.scenario.topology, o.status if o.passed or o.status != "Completed" else "BAD",
             f"{o.seconds:.1f}s", _fmt(o.first_loss), _fmt(o.last_loss),
             ",".join(o.diagnostics) or "-") for o in outcomes]
    text = table(["scenario", "lightning", "distribution", "hosts x gpus", "status", "wall",
                  "first loss", "last loss", "diagnostics"], rows)
    problems = [f"  {o.scenario.name}: {o.problem}" for o in outcomes if o.problem]
    if problems:
        text += "\n\nproblems:\n" + "\n".join(p[:1200] for p in problems)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m examples.run_matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[],
                        help="run only scenarios whose name starts with this (repeatable)")
    parser.add_argument("--backend", choices=["process", "docker"], default="process")
    parser.add_argument("--output-dir", type=Path, help="keep job outputs here (default: a temp dir)")
    parser.add_argument("--echo", action="store_true", help="stream host logs to the console")
    args = parser.parse_args(argv)

    everything = [*scenarios(), *framework_scenarios()]
    chosen = [s for s in everything if not args.only or any(s.name.startswith(o) for o in args.only)]
    if not chosen:
        parser.error(f"no scenario matches {args.only}; known: {', '.join(s.name for s in everything)}")
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="emulator-matrix-"))
    outcomes: list[Outcome] = []
    try:
        channel = data.generate(root / "data" / "training")
        for scenario in chosen:
            print(f"running {scenario.name} ...", file=sys.stderr, flush=True)
            outcome = run_one(scenario, channel=channel, output=root / "jobs", backend=args.backend,
                              echo=args.echo)
            print(f"  {outcome.status} in {outcome.seconds:.1f}s", file=sys.stderr, flush=True)
            outcomes.append(outcome)
    finally:
        if args.output_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(render(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
