#!/usr/bin/env python3
"""Opacus reference for benches/dp_sgd.rs: examples/s of one DP-SGD step (per-example
gradients, flat clipping at C = 1, noise multiplier 1, Adam) on the
same architectures as hush (DS-CNN-S, leak-CNN) over [98, 40] features, 12 classes, CPU.

Dropout as in hush's default configs (0.2 before the DS-CNN classifier, 0.5 before the
leak-CNN's last FC). Opacus has no per-sample rule for the custom FrozenStatsBN module and
falls back to its functorch (vmap) per-sample gradients there; convs and linears use its
hooks. torch uses all CPU threads (as hush's flex backend does).

Opacus cannot train BatchNorm per example; hush runs batch norm on stored statistics
(a fixed affine map plus trainable gamma/beta), so here BatchNorm is replaced by the same:
an eval-mode BatchNorm2d whose affine parameters train (running statistics frozen).

Usage: dp_sgd_opacus.py --arch ds-cnn-s|leak-cnn --batch 64 --steps 5 [--device cpu|cuda]
Prints one JSON object: {"arch", "batch", "steps", "examples_per_s", "torch", "opacus"}.
"""

import argparse
import json
import time

import opacus
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn

FRAMES, BINS, CLASSES = 98, 40, 12


class FrozenStatsBN(nn.Module):
    """BatchNorm on fixed statistics (mean 0, var 1) with trainable per-channel affine."""

    def __init__(self, c):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(c))
        self.beta = nn.Parameter(torch.zeros(c))
        self.eps = 1e-5

    def forward(self, x):
        scale = (self.gamma / (1.0 + self.eps) ** 0.5).view(1, -1, 1, 1)
        return x * scale + self.beta.view(1, -1, 1, 1)


class DsCnnS(nn.Module):
    def __init__(self, c=64, blocks=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c, (10, 4), stride=2, padding=(4, 1), bias=False)
        self.bn1 = FrozenStatsBN(c)
        layers = []
        for _ in range(blocks):
            layers += [
                nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False),
                FrozenStatsBN(c),
                nn.ReLU(),
                nn.Conv2d(c, c, 1, bias=False),
                FrozenStatsBN(c),
                nn.ReLU(),
            ]
        self.blocks = nn.Sequential(*layers)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(c, CLASSES)

    def forward(self, x):
        x = x.unsqueeze(1)
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        return self.fc(self.dropout(x.mean(dim=(2, 3))))


class LeakCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.pool = nn.MaxPool2d(2, 2)
        t = ((FRAMES - 2) // 2 - 2) // 2
        f = ((BINS - 2) // 2 - 2) // 2
        self.fc1 = nn.Linear(64 * t * f, 128)
        self.dropout = nn.Dropout(0.5)
        self.fc2 = nn.Linear(128, CLASSES)

    def forward(self, x):
        x = x.unsqueeze(1)
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.dropout(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="ds-cnn-s")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    a = p.parse_args()
    torch.manual_seed(1)
    dev = torch.device(a.device)
    model = (DsCnnS() if a.arch == "ds-cnn-s" else LeakCnn()).to(dev)
    model = GradSampleModule(model)
    opt = DPOptimizer(
        torch.optim.Adam(model.parameters(), lr=1e-3),
        noise_multiplier=1.0,
        max_grad_norm=1.0,
        expected_batch_size=a.batch,
    )
    x = torch.randn(a.batch, FRAMES, BINS, device=dev)
    y = torch.arange(a.batch, device=dev) % CLASSES
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step()
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    dt = time.perf_counter() - t
    print(
        json.dumps(
            {
                "arch": a.arch,
                "batch": a.batch,
                "steps": a.steps,
                "device": str(dev),
                "examples_per_s": a.steps * a.batch / dt,
                "torch": torch.__version__,
                "opacus": opacus.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
