"""One timed window per GPU at a time: a Ray actor per (node, GPU) that trials queue at.

Several trials may share a GPU (GPU fractions) so their compilation, which is CPU work, overlaps; their GPU
work must not overlap anyone's timed steps. Each trial holds its GPU's gate from its second step (the
first one compiles) to its last timed step (the training loop takes the gate as a plain context manager
and knows nothing of Ray). So while one run is timed, the others on its GPU can only be compiling; the
gate counts them (`compiling_beside`), since a compile's first run and max-autotune's benchmarking do touch
the GPU. A trial that dies holding the gate cannot block the rest: its lease expires after `lease_s`.
"""

from __future__ import annotations

import asyncio
import time

import ray

LEASE_S = 300.0  # longer than any timed window of a speed run; only a dead holder reaches it
NAMESPACE = "hybrid-tuner"


@ray.remote(num_cpus=0)
class TimingGate:
    """A FIFO lock with leases. Async actor: waiters park in the event loop, not in threads."""

    def __init__(self, lease_s: float = LEASE_S):
        self.lease_s = lease_s
        self.holder: str | None = None
        self.expires = 0.0
        self.freed = asyncio.Condition()
        self.windows = 0
        self.compiling: set[str] = set()  # trials on this GPU that have not reached the gate yet
        self.beside: set[str] = set()  # of those, the ones seen during the current window

    async def arrive(self, who: str) -> None:
        async with self.freed:
            self.compiling.add(who)
            if self.holder is not None:
                self.beside.add(who)

    async def leave(self, who: str) -> None:
        async with self.freed:
            self.compiling.discard(who)
            self.freed.notify_all()

    def _busy(self, quiet: bool) -> bool:
        held = self.holder is not None and time.monotonic() < self.expires
        return held or (quiet and bool(self.compiling))

    async def acquire(self, who: str, quiet: bool = False) -> float:
        """Blocks until `who` holds the gate (with `quiet`, also until no other run on this GPU is
        compiling, so launch-bound runs are timed with the CPUs to themselves); returns the seconds waited."""
        started = time.monotonic()
        async with self.freed:
            self.compiling.discard(who)  # it has compiled: it is here for its window
            self.freed.notify_all()
            while self._busy(quiet):
                timeout = max(0.01, self.expires - time.monotonic()) if self.holder else 1.0
                try:
                    await asyncio.wait_for(self.freed.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
            self.holder, self.expires = who, time.monotonic() + self.lease_s
            self.windows += 1
            self.beside = set(self.compiling)
        return time.monotonic() - started

    async def release(self, who: str) -> int:
        """Frees the gate; returns how many other runs on this GPU were compiling during the window."""
        async with self.freed:
            if self.holder != who:
                return 0
            self.holder = None
            self.freed.notify_all()
            return len(self.beside)

    def stats(self) -> dict:
        return {"holder": self.holder, "windows": self.windows}


def gate_name(node_id: str, gpu: int | str) -> str:
    return f"timing-gate:{node_id}:{gpu}"


def _gate(node_id: str, gpu: int | str):
    return TimingGate.options(name=gate_name(node_id, gpu), namespace=NAMESPACE, get_if_exists=True).remote()


def open_gates() -> list:
    """One gate per GPU of every alive node, owned by the caller (the search's driver), so they live as
    long as the search and no trial's exit takes one down. Returns the handles (keep them)."""
    return [
        _gate(node["NodeID"], index)
        for node in ray.nodes()
        if node.get("Alive")
        for index in range(int(node.get("Resources", {}).get("GPU", 0)))
    ]


class GateClient:
    """The context manager the training loop holds around its timed steps."""

    def __init__(self, node_id: str, gpu: int | str, who: str, quiet: bool = False):
        self.who, self.quiet = who, quiet
        self.actor = _gate(node_id, gpu)  # the driver's, when the search opened them
        ray.get(self.actor.arrive.remote(who))
        self.waited_s = 0.0
        self.compiling_beside = 0

    def __enter__(self) -> GateClient:
        self.waited_s += ray.get(self.actor.acquire.remote(self.who, self.quiet))
        return self

    def __exit__(self, *exc) -> None:
        self.compiling_beside = ray.get(self.actor.release.remote(self.who))

    def close(self) -> None:
        """The trial is over (also when it failed before it reached the gate)."""
        self.actor.leave.remote(self.who)
