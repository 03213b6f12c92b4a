"""Single-host MNIST on the CPU: plain torch, no distribution (ml.m5.xlarge)."""

import argparse
import json
import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def load(channel):
    data = np.load(os.path.join(channel, "mnist.npz"))
    images = torch.from_numpy(data["images"]).float().div(255.0).view(-1, 784)
    return TensorDataset(images, torch.from_numpy(data["labels"]))


def save_metrics(folder, **values):
    """What the example matrix judges, as a file in output.tar.gz: read from a file, it cannot be
    split the way mpirun's --tag-output may split a printed line."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(values, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    args = parser.parse_args()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = DataLoader(load(args.data_dir), batch_size=args.batch_size, shuffle=True)
    losses = []
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch={epoch} loss={losses[-1]:.4f}")
    print(f"first_loss={losses[0]:.4f}")
    print(f"last_loss={np.mean(losses[-5:]):.4f}")
    save_metrics(args.output_data_dir, first_loss=losses[0], last_loss=float(np.mean(losses[-5:])),
                 world_size=1, gpus_per_host=int(os.environ.get("SM_NUM_GPUS", "0")), torch=torch.__version__)
    torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pt"))


if __name__ == "__main__":
    main()
