"""A user's first adapter of a model that is not a language model (issue 56): an MLP on a TensorDataset of
features and labels, with no `unit`. Counted as the default, seq_len tokens an example, it would train
tokens / (batch_size x seq_len) steps: 7 where its budget holds 1,792. The checks before any work refuse it
in one line naming `unit`; `make_counted_workload` is the same adapter saying what it counts."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset


class MLPJob:
    def __init__(self, cfg):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(512, 8, generator=g)
        self.data = TensorDataset(x, (x.sum(1) > 0).long())

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))

    def train_dataset(self) -> TensorDataset:
        return self.data

    def loss(self, model: nn.Module, batch) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)


class CountedMLPJob(MLPJob):
    unit = "examples"


def make_workload(cfg) -> MLPJob:
    return MLPJob(cfg)


def make_counted_workload(cfg) -> CountedMLPJob:
    return CountedMLPJob(cfg)
