"""An MNIST job written the way the SageMaker PyTorch toolkit's own test script is
(aws/sagemaker-pytorch-training-toolkit ``test/resources/mnist/mnist.py``): torchvision's ``MNIST``
dataset and transforms, the toolkit's ``environment.Environment()`` for hosts and channels, one
process per host with ``init_process_group(backend=--backend, rank=<host index>)``, DDP when a GPU
is asked for, gradients averaged by hand on CPU. Written here (not copied); its data are synthetic
images in torchvision's processed MNIST format (``MNIST/processed/{training,test}.pt``)."""

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed
from sagemaker_training import environment
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(x), dim=1)


def main(args):
    distributed = len(args.hosts) > 1 and args.backend is not None
    use_cuda = args.processor == "gpu" or args.num_gpus > 0
    device = torch.device("cuda" if use_cuda else "cpu")
    rank = args.hosts.index(args.current_host)
    if distributed:
        os.environ["WORLD_SIZE"] = str(len(args.hosts))
        os.environ["RANK"] = str(rank)
        dist.init_process_group(backend=args.backend, rank=rank, world_size=len(args.hosts))
    torch.manual_seed(1)
    normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = datasets.MNIST(args.data_dir, train=True, transform=normalize)
    sampler = torch.utils.data.distributed.DistributedSampler(train_set) if distributed else None
    loader = torch.utils.data.DataLoader(train_set, batch_size=16, shuffle=sampler is None, sampler=sampler)
    model = Net().to(device)
    if distributed and use_cuda:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        if distributed and not use_cuda:
            for param in model.parameters():
                dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
                param.grad.data /= dist.get_world_size()
        optimizer.step()
    test_set = datasets.MNIST(args.data_dir, train=False, transform=normalize)
    correct = 0
    model.eval()
    with torch.no_grad():
        for data, target in torch.utils.data.DataLoader(test_set, batch_size=32):
            correct += model(data.to(device)).argmax(1).eq(target.to(device)).sum().item()
    torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pth"))
    print("MNIST " + json.dumps({"rank": rank, "hosts": len(args.hosts), "backend": args.backend,
                                 "device": str(device), "samples": len(loader.sampler), "correct": correct,
                                 "torchvision": __import__("torchvision").__version__}), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", type=str, default=None)
    parser.add_argument("--processor", type=str, default="cpu")
    env = environment.Environment()
    parser.add_argument("--hosts", type=list, default=env.hosts)
    parser.add_argument("--current-host", type=str, default=env.current_host)
    parser.add_argument("--model-dir", type=str, default=env.model_dir)
    parser.add_argument("--data-dir", type=str, default=env.channel_input_dirs["training"])
    parser.add_argument("--num-gpus", type=int, default=env.num_gpus)
    main(parser.parse_args())
