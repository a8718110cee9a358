"""Flower side of the population-scale federated throughput benchmark.

Measures how fast Flower's simulation engine (Ray backend, 2 CPUs, 1 CPU and one
torch thread per client, no GPU) runs FedAvg rounds over a large synthetic population:
each round's wall time as seen from the server (sampling the cohort, sending the
global model, client training, receiving replies, aggregating), client updates per
second, and the driver process's peak RSS. Nothing here learns; it is throughput only.

The workload matches `trainer-host/benches/population.rs` (the in-process Rust fleet):
- N users (HUSH_BENCH_USERS, default 10 000); a user's 10 examples are made from its
  index when it is drawn (uniform [-1, 1) features [1, 101, 40], uniform class of 12;
  numpy with a per-user seed), so memory follows the cohort, not the population;
- DS-CNN-S (Zhang et al. 2017, "Hello Edge"): conv 64×(10×4) stride 2, padding (4, 1),
  BN, ReLU; 4 × (3×3 depthwise, BN, ReLU, 1×1 pointwise, BN, ReLU); global average
  pool; dropout 0.2; Linear(64, 12). Convs without bias, as in hush-models' ds_cnn.rs,
  giving the same 23 180 trainable parameters;
- each sampled user does one local step of SGD (lr 0.05) on its 10 examples as one
  batch of 10 (cross-entropy) and returns its weights;
- FedAvg over cohorts of q × N users (HUSH_BENCH_Q, default 0.05: ≈ 500), no
  evaluation, for R rounds (HUSH_BENCH_ROUNDS, default 3).
The Rust side adds clipping, central noise and a privacy ledger, which Flower does not.

    /tmp/flwr-venv/bin/python trainer-host/benches/population_flower.py
    HUSH_BENCH_USERS=1000 HUSH_BENCH_Q=0.5 /tmp/flwr-venv/bin/python trainer-host/benches/population_flower.py
"""

import os
import platform
import resource
import time

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network: no telemetry
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import flwr
import ray
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

USERS = int(os.environ.get("HUSH_BENCH_USERS", 10_000))
Q = float(os.environ.get("HUSH_BENCH_Q", 0.05))
ROUNDS = int(os.environ.get("HUSH_BENCH_ROUNDS", 3))
FRAMES, BINS, CLASSES, EXAMPLES, LR = 101, 40, 12, 10, 0.05


class DsCnnS(nn.Module):
    """DS-CNN-S, laid out as hush-models' ds_cnn.rs (bias-free convs before batch norm)."""

    def __init__(self, c: int = 64, blocks: int = 4):
        super().__init__()
        # (k - 1) // 2 padding on each side, as the Rust model: [1, 101, 40] -> [64, 50, 20].
        self.conv1 = nn.Conv2d(1, c, (10, 4), stride=(2, 2), padding=(4, 1), bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.blocks = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
            )
            for _ in range(blocks)
        )
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(c, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        for block in self.blocks:
            x = block(x)
        return self.fc(self.dropout(x.mean(dim=(2, 3))))


def user_data(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """User i's 10 examples, made from its index (same seed base as the Rust side)."""
    rng = np.random.default_rng(0x5EED_0000 + i)
    x = rng.uniform(-1.0, 1.0, size=(EXAMPLES, 1, FRAMES, BINS)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=EXAMPLES)
    return torch.from_numpy(x), torch.from_numpy(y)


# ---- ClientApp: one local SGD step of 10 on the user's data --------------------------
client_app = ClientApp()
_model = None  # one model per Ray actor process, reused across the clients it runs


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    global _model
    torch.set_num_threads(1)
    if _model is None:
        _model = DsCnnS()
    model = _model
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.train()  # batch norm in train mode, dropout on
    x, y = user_data(int(context.node_config["partition-id"]))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    metrics = MetricRecord({"train_loss": loss.item(), "num-examples": EXAMPLES})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    return Message(content=content, reply_to=msg)


# ---- ServerApp: FedAvg with per-round wall times ------------------------------------
ROUND_TIMES: list[float] = []  # seconds per round, configure_train -> end of aggregate_train
UPDATES: list[int] = []  # client updates received per round


class TimedFedAvg(FedAvg):
    """FedAvg that records each round's wall time on the server (ServerApp thread)."""

    def configure_train(self, server_round, arrays, config, grid):
        self._t0 = time.perf_counter()
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        out = super().aggregate_train(server_round, replies)
        ROUND_TIMES.append(time.perf_counter() - self._t0)
        UPDATES.append(sum(not m.has_error() for m in replies))
        return out


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    strategy = TimedFedAvg(
        fraction_train=Q,
        fraction_evaluate=0.0,  # no federated evaluation
        min_train_nodes=1,
        min_available_nodes=USERS,  # wait for the whole population to be registered
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(DsCnnS().state_dict()),
        num_rounds=ROUNDS,
        train_config=ConfigRecord({"lr": LR}),
    )


def run() -> None:
    print(
        f"flwr {flwr.__version__}, torch {torch.__version__}, ray {ray.__version__}, "
        f"Python {platform.python_version()}"
    )
    params = sum(p.numel() for p in DsCnnS().parameters() if p.requires_grad)
    print(f"DS-CNN-S: {params} trainable parameters")
    backend_config = {
        "init_args": {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False},
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
    }
    t0 = time.perf_counter()
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=USERS,
        backend_name="ray",
        backend_config=backend_config,
    )
    total = time.perf_counter() - t0  # includes Ray start-up and shut-down
    if len(ROUND_TIMES) != ROUNDS:
        raise SystemExit(f"only {len(ROUND_TIMES)} of {ROUNDS} rounds completed")

    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    ups = sum(UPDATES) / sum(ROUND_TIMES)
    ups2 = sum(UPDATES[1:]) / sum(ROUND_TIMES[1:]) if ROUNDS > 1 else float("nan")
    per_round = " ".join(f"{s:.2f}" for s in ROUND_TIMES)
    print(
        f"flower bench: {USERS} users, q = {Q}, {ROUNDS} rounds, {params} parameters; "
        f"per round: {per_round} s; mean {np.mean(ROUND_TIMES):.2f} s a round; "
        f"{ups:.1f} client updates/s (excluding round 1: {ups2:.1f}); total {total:.1f} s; "
        f"peak RSS of the driver {rss_mib:.0f} MiB"
    )


if __name__ == "__main__":
    run()
