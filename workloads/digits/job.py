"""A workload that is not a language model: a small CNN on scikit-learn's bundled digits.

1,797 8x8 grey images of the digits 0-9, shipped inside scikit-learn (`load_digits` reads a file in the
package: nothing is downloaded); a fixed fifth of them, chosen by a seeded shuffle, is the validation set.
It counts images (`unit`), one per example, reports its accuracy beside the val loss (`metrics`), and
reads no corpus, so the search resolves none.

    pip install -e '.[workloads]'      # scikit-learn
    python -m trainables.train --config workloads/digits/cpu.yaml --json
    python -m tuner.search --config workloads/digits/cpu.yaml --out out/digits
"""

from dataclasses import dataclass

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

VAL_SHARE = 0.2
SPLIT_SEED = 0  # the split is the data's, not the run's: every run validates on the same images


@dataclass
class Settings:  # train.model: what `--set train.model.<key>=...` changes
    channels: int = 16
    hidden: int = 64
    dropout: float = 0.1


class DigitsCNN(nn.Module):
    def __init__(self, s: Settings):
        super().__init__()
        self.settings = s
        self.conv1 = nn.Conv2d(1, s.channels, 3, padding=1)
        self.conv2 = nn.Conv2d(s.channels, 2 * s.channels, 3, padding=1)
        self.fc1 = nn.Linear(2 * s.channels * 4 * 4, s.hidden)
        self.fc2 = nn.Linear(s.hidden, 10)
        self.drop = nn.Dropout(s.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, 1, 8, 8] -> logits [B, 10]
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


def _split() -> tuple[TensorDataset, TensorDataset]:
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # [N, 1, 8, 8] in 0..1
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_val = int(len(labels) * VAL_SHARE)
    val, train = order[:n_val], order[n_val:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[val], labels[val])


class Digits:
    unit = "images"  # speeds read images/s; tokens / eval_tokens in the config count images
    # Its val loss is ~0.04-0.1: 0.05 nats absolute (the search's default, made for an LM at ~1.5) would let a
    # config lose most of its fit; 10% of the baseline's loss holds it, where the config sets no tolerance.
    loss_tolerance = ("relative", 0.10)

    def __init__(self, cfg, settings: Settings):
        self.cfg, self.settings = cfg, settings
        self.train, self.val = _split()

    def describe(self) -> str:
        return f"small CNN on scikit-learn's digits ({len(self.train):,} train / {len(self.val):,} val 8x8 images)"

    def build_model(self) -> DigitsCNN:
        return DigitsCNN(self.settings)

    def train_dataset(self) -> TensorDataset:  # a TensorDataset: loader=device comes with it
        return self.train

    def val_dataset(self) -> TensorDataset:
        return self.val

    def loss(self, model: DigitsCNN, batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x).float(), y)

    def metrics(self, model: DigitsCNN, batch) -> dict[str, torch.Tensor]:
        x, y = batch
        return {"accuracy": (model(x).argmax(-1) == y).float().mean()}

    def flops_per_token(self, model: DigitsCNN) -> float:
        """Training FLOPs per image (6 x multiply-adds: forward 2, backward 4): the convolutions apply their
        weights at every pixel, so 6 x parameters would undercount them."""
        c, h = model.settings.channels, model.settings.hidden
        macs = 64 * 9 * c + 64 * 9 * c * 2 * c + 2 * c * 16 * h + h * 10
        return 6.0 * macs


def make_workload(cfg, model: Settings) -> Digits:
    return Digits(cfg, model)
