"""The example matrix (``examples/run_matrix.py``): a fast subset by default, the rest ``slow``.

Each scenario runs its example's own SDK launcher through ``python -m emulator launch`` and must do
what the matrix requires: the job completes, the loss goes down, rank 0's model is in
``model.tar.gz``. ``test_the_matrix_follows_a_changed_launcher`` is the drift check: the matrix has
no estimator values of its own, so a change in a launcher is what the job runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from examples import data
from examples.mnist_lightning15.repack_wheel import RELEASE as LIGHTNING15
from examples.run_matrix import HERE, SCENARIOS, Outcome, Scenario, render, run_one

from ..conftest import require_mpi

FAST = ("mnist_single", "torch_ddp[torch_distributed]")
#: Run by the default suite: FAST. The rest of the matrix is marked ``matrix``: ``nox -s emulate``
#: runs every scenario, ``nox -s tests -- -m matrix`` these tests of them. What they cover is tested
#: in the default suite on smaller jobs too: Lightning DDP and smddp fits (tests/jobs/inhost/test_lightning.py,
#: tests/jobs/test_examples_negative.py), a requirements.txt job environment (tests/jobs/test_jobs.py), mpirun
#: (tests/jobs/test_mpi_launch.py, tests/jobs/test_profiles_equivalence.py).
SUITE = FAST
BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}
#: The Lightning each Lightning example's ranks must import: the release its requirements.txt pins
#: (no DLC ships Lightning, and jobs do not see the one installed here).
LIGHTNING = {"mnist_lightning15": LIGHTNING15, "mnist_lightning": "pinned", "bert_lightning": "pinned"}


def _pinned(example: str) -> str:
    """The pytorch-lightning release ``examples/<example>/requirements.txt`` pins."""
    text = (Path(__file__).parents[2] / "examples" / example / "requirements.txt").read_text()
    (pin,) = [line.split("==", 1)[1].strip() for line in text.splitlines() if line.startswith("pytorch-lightning==")]
    return pin


def _params() -> list[object]:
    return [pytest.param(name, id=name, marks=(() if name in FAST else (pytest.mark.slow,))
                         + (() if name in SUITE else (pytest.mark.matrix,))) for name in BY_NAME]


@pytest.mark.parametrize("name", _params())
def test_scenario(name: str, tmp_path: Path) -> None:
    """The scenario completes, learns, and saves rank 0's model, with the Lightning it asked for."""
    scenario = BY_NAME[name]
    if "pytorchddp" in name or "smddp" in name:
        require_mpi()
    outcome = run_one(scenario, work=tmp_path)
    assert outcome.passed, render([outcome])
    assert outcome.diagnostics == (), outcome.diagnostics
    expected = LIGHTNING.get(scenario.example, "-")
    if expected == "pinned":
        expected = _pinned(scenario.example)
    assert outcome.lightning == expected, render([outcome])


def test_the_matrix_follows_a_changed_launcher(tmp_path: Path) -> None:
    """Change the instance type in a copy of a launcher: the matrix's job runs the new one."""
    examples = tmp_path / "examples"
    shutil.copytree(HERE / "mnist_single", examples / "mnist_single",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("__init__.py", "data.py"):
        shutil.copy(HERE / name, examples / name)
    launcher = examples / "mnist_single" / "launch.py"
    text = launcher.read_text()
    assert text.count('instance_type="ml.m5.xlarge"') == 1
    launcher.write_text(text.replace('instance_type="ml.m5.xlarge"', 'instance_type="ml.c5.2xlarge"'))
    outcome = run_one(Scenario("changed", "mnist_single", gpus_per_host=None, examples_dir=examples),
                      work=tmp_path / "work")
    assert outcome.passed, render([outcome])
    assert (outcome.instance_type, outcome.topology) == ("ml.c5.2xlarge", "1x0")


def test_generated_data_is_mnist_shaped() -> None:
    """28×28 uint8 images, ten classes, every class present."""
    images, labels = data.mnist_like(256)
    assert images.shape == (256, 28, 28) and images.dtype.name == "uint8"
    assert set(labels.tolist()) == set(range(10))


def _outcome(**metrics: object) -> Outcome:
    description = {"TrainingJobStatus": "Completed", "ResourceConfig": {"InstanceType": "ml.m5.xlarge",
                                                                        "InstanceCount": 1}}
    return Outcome(BY_NAME["mnist_single"], 0, "", description, dict(metrics), ("model.pt",))


def test_outcome_requires_a_decreasing_loss() -> None:
    """A completed job whose loss went up does not pass, and the table says why."""
    assert _outcome(first_loss=0.9, last_loss=0.5).passed
    outcome = _outcome(first_loss=0.5, last_loss=0.9)
    assert not outcome.passed
    assert "did not decrease" in render([outcome])
    assert "wrote no first_loss" in render([_outcome()])
