"""Run the example matrix on the emulator and print one table.

``python -m examples.run_matrix [--only NAME] [--backend process|docker] [--output-dir DIR]``

Every scenario is one example's own SDK launcher, run as a user runs it on the emulator:
``python -m emulator launch examples/<example>/launch.py <its options>``, with
``SAGEMAKER_EMULATOR_GPUS_PER_HOST`` for 2 emulated GPUs per host. The matrix holds no estimator
value of its own (instance type, count, distribution, hyperparameters): they come from the
launcher, and every figure in the table comes from the job (``job.json``) or from what rank 0
wrote into ``output.tar.gz`` (``metrics.json``: losses, the Lightning version the ranks imported,
``SM_NUM_GPUS``). A scenario passes when the launcher exits 0, the job completed, the loss went
down, and rank 0's model is in ``model.tar.gz``. Exit status 1 if any scenario does not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from emulator.progress import PREFIX

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Files that count as rank 0's model in ``model.tar.gz``.
MODEL_FILES = ("model.pt", "model.safetensors", "pytorch_model.bin")
#: A scenario that runs longer is stopped (SIGINT: the SDK session stops the job) and fails.
TIMEOUT = 1800.0
#: What a launcher may not see: nothing of a real AWS account is needed or used.
#: A job's start as the emulator says it (``supervisor``), passed on in table mode with the
#: progress lines (:data:`emulator.progress.PREFIX`): no phase is silent for minutes.
STARTING = re.compile(r"\[emulator\] \S+: starting \d+ host\(s\)")
AWS_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


@dataclass(frozen=True)
class Scenario:
    """One job of the matrix: an example's launcher and the options it is given."""

    name: str
    example: str
    args: tuple[str, ...] = ()
    #: ``SAGEMAKER_EMULATOR_GPUS_PER_HOST`` (emulate fewer GPUs than the instance type has);
    #: ``None`` for CPU instance types.
    gpus_per_host: int | None = 2
    #: The folder that holds the examples (another one in the drift test).
    examples_dir: Path = HERE
    #: The backend this scenario always runs on (None: ``--backend``).
    backend: str | None = None
    #: The DLC family its launcher names (``framework_version``): that family's image is built,
    #: with progress on the console, right before the scenario runs (None: today's torch).
    framework: str | None = None

    @property
    def launcher(self) -> Path:
        return self.examples_dir / self.example / "launch.py"


#: The matrix, in the order it runs.
SCENARIOS = (
    Scenario("mnist_single", "mnist_single", gpus_per_host=None),
    Scenario("torch_ddp[torch_distributed]", "torch_ddp", ("--distribution", "torch_distributed")),
    Scenario("torch_ddp[pytorchddp]", "torch_ddp", ("--distribution", "pytorchddp")),
    Scenario("mnist_lightning[ddp]", "mnist_lightning", ("--backend", "ddp")),
    Scenario("mnist_lightning[smddp]", "mnist_lightning", ("--backend", "smddp")),
    Scenario("mnist_lightning15[ddp]", "mnist_lightning15", ("--backend", "ddp")),
    Scenario("mnist_lightning15[smddp]", "mnist_lightning15", ("--backend", "smddp")),
    Scenario("bert_lightning[ddp]", "bert_lightning", ("--backend", "ddp")),
    Scenario("bert_lightning[smddp]", "bert_lightning", ("--backend", "smddp")),
)


def framework_scenarios() -> list[Scenario]:
    """Jobs that name a ``framework_version`` (their DLC's torch and Python, so the docker
    backend whatever ``--backend`` says), when a docker engine answers here (their image is built
    by :func:`ensure_image`, not needed before). Their test is tests/jobs/test_framework_jobs.py."""
    try:
        from emulator.backends.docker import engine

        engine.client()
    except Exception:
        return []
    return [Scenario("mnist_lightning16_smddp", "mnist_lightning16_smddp", backend="docker", framework="1.12")]


def ensure_image(scenario: Scenario) -> None:
    """Build the image of ``scenario``'s framework family if it is not built yet, saying what is
    built and roughly how long it takes (``emulator.backends.docker.images``; once per machine, then cached).
    Built here, not by ``.ci/setup``, so the other scenarios' results come first; not in the
    background while they run: on 2 cores that made the first two scenarios' environments and the
    build contend (measured on a fresh engine, 2026-12-08: 940 s for the three, 752 s one after
    another)."""
    if scenario.framework is None:
        return
    from emulator.backends.docker import images
    from emulator.job import dlc, frameworks

    # the family's GPU image: the docker scenarios run SMDDP launchers on GPU instance types
    image = dlc.pytorch_image(frameworks.family(scenario.framework).name, gpu=True)
    if images.built_image(image) is None:
        images.build(image, say=lambda line: print(f"  {line}", file=sys.stderr, flush=True))


@dataclass(frozen=True)
class Outcome:
    """What one scenario did: the launcher's exit status, and the job's own facts."""

    scenario: Scenario
    launcher_exit: int
    launcher_log: str
    description: dict[str, Any]  # job.json ({} when the launcher never created a job)
    metrics: dict[str, Any]  # rank 0's metrics.json from output.tar.gz ({} when missing)
    model_files: tuple[str, ...]
    job_dir: Path | None = None

    @property
    def status(self) -> str:
        return str(self.description.get("TrainingJobStatus", "NoJob"))

    @property
    def failure_reason(self) -> str | None:
        return self.description.get("FailureReason")

    @property
    def instance_type(self) -> str:
        return str(self.description.get("ResourceConfig", {}).get("InstanceType", "-"))

    @property
    def topology(self) -> str:
        count = self.description.get("ResourceConfig", {}).get("InstanceCount", "?")
        return f"{count}x{self.metrics.get('gpus_per_host', '?')}"

    @property
    def runner(self) -> str:
        return str(self.description.get("Emulator", {}).get("Runner") or "-")

    @property
    def lightning(self) -> str:
        return str(self.metrics.get("lightning", "-"))

    @property
    def seconds(self) -> float | None:
        """The job's own duration (creation to end, from ``job.json``)."""
        try:
            start = datetime.fromisoformat(self.description["CreationTime"])
            return (datetime.fromisoformat(self.description["TrainingEndTime"]) - start).total_seconds()
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def first_loss(self) -> float | None:
        return self.metrics.get("first_loss")

    @property
    def last_loss(self) -> float | None:
        return self.metrics.get("last_loss")

    @property
    def diagnostics(self) -> tuple[str, ...]:
        return tuple(d["Kind"] for d in self.description.get("Emulator", {}).get("Diagnostics", []))

    @property
    def model_saved(self) -> bool:
        return any(Path(name).name in MODEL_FILES for name in self.model_files)

    @property
    def passed(self) -> bool:
        return self.problem is None

    @property
    def problem(self) -> str | None:
        """Why the scenario did not pass (None if it did)."""
        if not self.description:
            return f"the launcher (exit {self.launcher_exit}) created no job:\n{_tail(self.launcher_log)}"
        if self.status != "Completed":
            return f"{self.status}: {self.failure_reason}"
        if self.launcher_exit != 0:
            return f"the launcher exited {self.launcher_exit}:\n{_tail(self.launcher_log)}"
        if self.first_loss is None or self.last_loss is None:
            return "rank 0 wrote no first_loss/last_loss into output.tar.gz (metrics.json)"
        if not self.last_loss < self.first_loss:
            return f"loss did not decrease ({self.first_loss} -> {self.last_loss})"
        if not self.model_saved:
            return "rank 0's model is missing from model.tar.gz"
        return None


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _members(path: Path) -> dict[str, bytes]:
    if not path.is_file():
        return {}
    with tarfile.open(path) as tar:
        return {m.name: f.read() for m in tar.getmembers() if m.isfile() and (f := tar.extractfile(m))}


def _launch(cmd: list[str], env: dict[str, str], log: Path, *, echo: bool, timeout: float) -> int:
    """Run the launcher, its output into ``log`` (and to stderr with ``echo``); return its exit status."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def copy() -> None:
        assert proc.stdout is not None
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                if echo:
                    sys.stderr.write(line)
                elif PREFIX in line or STARTING.search(line):  # the phases, in table mode too
                    sys.stderr.write(f"  {line.strip().removeprefix('[emulator] ')}\n")
                    sys.stderr.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # fit() stops the job and tears its hosts down
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
    reader.join()
    return code


def run_one(scenario: Scenario, *, work: Path, backend: str = "process", echo: bool = False,
            timeout: float = TIMEOUT, profile: str = "ci") -> Outcome:
    """Run ``scenario``'s launcher through ``python -m emulator launch`` in ``work`` and judge it."""
    work.mkdir(parents=True, exist_ok=True)
    s3 = work / "s3"
    env = {k: v for k, v in os.environ.items() if k not in AWS_CREDENTIALS}
    env.update(SAGEMAKER_EMULATOR_S3_DIR=str(s3), SAGEMAKER_EMULATOR_BACKEND=scenario.backend or backend,
               SAGEMAKER_SUPPRESS_V2_WARNING="1", SAGEMAKER_EMULATOR_PROFILE=profile)
    env.pop("SAGEMAKER_EMULATOR_GPUS_PER_HOST", None)
    if scenario.gpus_per_host is not None:
        env["SAGEMAKER_EMULATOR_GPUS_PER_HOST"] = str(scenario.gpus_per_host)
    log = work / "launcher.log"
    code = _launch([sys.executable, "-m", "emulator", "launch", str(scenario.launcher), *scenario.args], env, log,
                   echo=echo, timeout=timeout)
    text = log.read_text(errors="replace")
    jobs = sorted(s3.rglob("job.json")) if s3.is_dir() else []
    if len(jobs) != 1:
        return Outcome(scenario, code, text + f"\n({len(jobs)} jobs found under {s3})", {}, {}, ())
    job_dir = jobs[0].parent
    description = json.loads(jobs[0].read_text())
    outputs = _members(job_dir / "output" / "output.tar.gz")
    metrics: dict[str, Any] = next((json.loads(data) for name, data in outputs.items()
                                    if Path(name).name == "metrics.json"), {})
    models = tuple(_members(job_dir / "output" / "model.tar.gz"))
    return Outcome(scenario, code, text, description, metrics, models, job_dir)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(outcomes: Sequence[Outcome]) -> str:
    """The matrix table (``emulator.console.table``) and one line per problem."""
    from emulator.console import table

    rows = [(o.scenario.name, o.instance_type, o.topology, o.runner, o.lightning,
             o.status if o.passed or o.status != "Completed" else "BAD",
             f"{_fmt(o.seconds, 1)}s", _fmt(o.first_loss), _fmt(o.last_loss),
             ",".join(o.diagnostics) or "-") for o in outcomes]
    text = table(["scenario", "instance type", "hosts x gpus", "runner", "lightning", "status", "job",
                  "first loss", "last loss", "diagnostics"], rows)
    problems = [f"  {o.scenario.name}: {o.problem}" for o in outcomes if o.problem]
    if problems:
        text += "\n\nproblems:\n" + "\n".join(p[:1500] for p in problems)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m examples.run_matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", default=[],
                        help="run only scenarios whose name starts with this (repeatable)")
    parser.add_argument("--backend", choices=["process", "docker"], default="process")
    parser.add_argument("--output-dir", type=Path, help="keep each scenario's S3 folder and jobs here "
                        "(default: a temp dir)")
    parser.add_argument("--echo", action="store_true", help="stream the launchers' output to the console")
    parser.add_argument("--profile", choices=["ci", "exact"], default="ci",
                        help="the emulator profile of every job (default ci: emulator/job/profiles.py)")
    args = parser.parse_args(argv)

    everything = [*SCENARIOS, *framework_scenarios()]
    chosen = [s for s in everything if not args.only or any(s.name.startswith(o) for o in args.only)]
    if not chosen:
        parser.error(f"no scenario matches {args.only}; known: {', '.join(s.name for s in everything)}")
    root = args.output_dir or Path(tempfile.mkdtemp(prefix="emulator-matrix-"))
    outcomes: list[Outcome] = []
    try:
        for scenario in chosen:
            print(f"running {scenario.name} ...", file=sys.stderr, flush=True)
            ensure_image(scenario)
            start = time.monotonic()
            work = root / re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario.name)
            outcome = run_one(scenario, work=work, backend=args.backend, echo=args.echo, profile=args.profile)
            print(f"  {outcome.status} in {time.monotonic() - start:.1f}s", file=sys.stderr, flush=True)
            outcomes.append(outcome)
    finally:
        if args.output_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(render(outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
