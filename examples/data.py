"""Generated training data for the examples (no downloads): MNIST-shaped images and short texts.

:func:`generate` writes into a channel folder:

- ``mnist.npz``: ``images`` (N×28×28 uint8) and ``labels`` (N int64). Each class is a fixed random
  stroke template; a sample is its template, shifted by up to two pixels, plus noise. A small MLP
  learns it within one epoch.
- ``text.jsonl``: ``{"text": ..., "label": 0|1}`` lines for the BERT example. Label 1 sentences
  contain one of the "positive" words; both classes share filler words.

Scripts read them from ``SM_CHANNEL_TRAINING`` (``/opt/ml/input/data/training``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

IMAGE_FILE = "mnist.npz"
TEXT_FILE = "text.jsonl"
FILLER = ("the", "a", "model", "cluster", "host", "rank", "gpu", "batch", "loss", "step", "job",
          "node", "data", "run", "fast", "slow", "small", "big", "on", "with")
POSITIVE = ("great", "good", "works", "passes", "fine")
NEGATIVE = ("broken", "fails", "hangs", "crash", "bad")


def mnist_like(samples: int = 2048, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` learnable 28×28 images and their labels (0-9)."""
    rng = np.random.default_rng(seed)
    templates = np.zeros((10, 28, 28), dtype=np.float32)
    for digit in range(10):
        for _ in range(4):  # four random strokes per class
            r, c = rng.integers(4, 24, size=2)
            dr, dc = rng.integers(-1, 2, size=2)
            for step in range(8):
                rr, cc = r + dr * step, c + dc * step
                if 0 <= rr < 27 and 0 <= cc < 27:
                    templates[digit, rr:rr + 2, cc:cc + 2] = 1.0
    labels = rng.integers(0, 10, size=samples)
    shifts = rng.integers(-2, 3, size=(samples, 2))
    images = np.empty((samples, 28, 28), dtype=np.float32)
    for i, (label, (sr, sc)) in enumerate(zip(labels, shifts)):
        images[i] = np.roll(templates[label], (int(sr), int(sc)), axis=(0, 1))
    images = np.clip(images * 0.8 + rng.normal(0.0, 0.25, images.shape), 0.0, 1.0)
    return (images * 255).astype(np.uint8), labels.astype(np.int64)


def texts(samples: int = 1024, *, seed: int = 1) -> list[dict[str, object]]:
    """``samples`` short sentences with a binary label."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for _ in range(samples):
        label = int(rng.integers(0, 2))
        words = list(rng.choice(FILLER, size=int(rng.integers(5, 12))))
        words.insert(int(rng.integers(0, len(words) + 1)),
                     str(rng.choice(POSITIVE if label else NEGATIVE)))
        rows.append({"text": " ".join(words), "label": label})
    return rows


def generate(channel: str | Path, *, samples: int = 2048) -> Path:
    """Write ``mnist.npz`` and ``text.jsonl`` into ``channel`` (created) and return it."""
    folder = Path(channel)
    folder.mkdir(parents=True, exist_ok=True)
    images, labels = mnist_like(samples)
    np.savez_compressed(folder / IMAGE_FILE, images=images, labels=labels)
    with open(folder / TEXT_FILE, "w") as out:
        for row in texts(samples // 2):
            out.write(json.dumps(row) + "\n")
    return folder


if __name__ == "__main__":
    import sys

    print(generate(sys.argv[1] if len(sys.argv) > 1 else "data/training"))
