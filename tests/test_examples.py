"""The example matrix (``examples/run_matrix.py``): a fast subset by default, the rest ``slow``.

Each test runs one scenario as a real job and requires what the matrix requires: the job
completes, the loss goes down, rank 0's model is in ``model.tar.gz``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import data
from examples.run_matrix import Outcome, Scenario, parse_losses, render, run_one, scenarios

FAST = ("mnist_single", "torch_ddp[torch_distributed]")
BY_NAME: dict[str, Scenario] = {s.name: s for s in scenarios()}


@pytest.fixture(scope="module")
def channel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated MNIST-shaped images and texts, shared by every scenario."""
    return data.generate(tmp_path_factory.mktemp("examples-data") / "training")


def _params() -> list[object]:
    return [pytest.param(name, id=name, marks=() if name in FAST else (pytest.mark.slow,))
            for name in BY_NAME]


@pytest.mark.parametrize("name", _params())
def test_scenario(name: str, channel: Path, tmp_path: Path) -> None:
    """The scenario completes, learns, and saves rank 0's model."""
    outcome = run_one(BY_NAME[name], channel=channel, output=tmp_path)
    assert outcome.passed, render([outcome])
    assert outcome.diagnostics == (), outcome.diagnostics


def test_generated_data_is_mnist_shaped() -> None:
    """28×28 uint8 images, ten classes, every class present."""
    images, labels = data.mnist_like(256)
    assert images.shape == (256, 28, 28) and images.dtype.name == "uint8"
    assert set(labels.tolist()) == set(range(10))


def test_parse_losses_reads_mpirun_tagged_lines() -> None:
    """Loss lines are found with or without mpirun's ``--tag-output`` prefix."""
    log = "x\n[1,mpirank:0,algo-1]<stdout>:first_loss=2.3000\nlast_loss=0.1000\n"
    assert parse_losses(log) == (2.3, 0.1)
    assert parse_losses("nothing here") == (None, None)


def test_outcome_requires_a_decreasing_loss() -> None:
    """A completed job whose loss went up does not pass, and the table says why."""
    outcome = Outcome(BY_NAME["mnist_single"], "Completed", 1.0, 0.5, 0.9, True, (), None)
    assert not outcome.passed
    assert "did not decrease" in render([outcome])
