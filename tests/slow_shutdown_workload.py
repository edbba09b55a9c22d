"""A toy workload (tests/toy_workload.py) whose data source takes seconds to shut down, as DataLoader worker
processes can on a loaded machine. A trial the search stops early then takes that long to end after Ray Tune
has stopped it, and Tune, handing its worker to the next trial, waits only 2 s for it: it fails that next
trial on its own ("Could not re-use actor"), and tells no callback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch
from toy_workload import ToyWorkload

SHUTDOWN_S = 8.0  # well over the 2 s Tune waits for a reused worker's previous trial to end


class SlowShutdownWorkload(ToyWorkload):
    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[tuple]:
        try:
            yield from super().train_batches(device, start_step)
        finally:  # closed when the run's objects are freed: after the trial was stopped
            time.sleep(SHUTDOWN_S)


def make_slow_shutdown_workload(cfg) -> SlowShutdownWorkload:
    return SlowShutdownWorkload(cfg)
