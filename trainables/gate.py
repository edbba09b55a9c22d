"""One timed window per GPU at a time: a Ray actor per (node, GPU) that trials queue at.

Several trials may share a GPU (GPU fractions) so their compilation, which is CPU work, overlaps; their GPU
work must not overlap anyone's timed steps. Each trial holds its GPU's gate from its second step (the
first one compiles) to its last timed step (the training loop takes the gate as a plain context manager
and knows nothing of Ray). So while one run is timed, the others on its GPU can only be compiling; the
gate counts them (`compiling_beside`), since a compile's first run and max-autotune's benchmarking do touch
the GPU, and a `quiet` window (the re-measure's) waits until none is compiling.

Trials are killed without warning (the early stopper, the screen's time budget, a crash), so the gate
never trusts them to say goodbye: it lives on its GPU's node and drops any trial whose process is gone,
whether it held the gate or was compiling; a holder that is alive but stuck loses the gate after `lease_s`.
"""

from __future__ import annotations

import asyncio
import os
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

LEASE_S = 300.0  # longer than any timed window of a speed run; only a stuck holder reaches it
CHECK_S = 1.0  # how often a waiter looks again for trials that died
NAMESPACE = "hybrid-tuner"


def alive(pid: int) -> bool:
    """Whether `pid` is a live process on this node (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@ray.remote(num_cpus=0)
class TimingGate:
    """A lock with leases and liveness checks. Async actor: waiters park in the event loop, not in threads."""

    def __init__(self, lease_s: float = LEASE_S):
        self.lease_s = lease_s
        self.holder: tuple[str, int] | None = None  # (trial, pid)
        self.expires = 0.0
        self.freed = asyncio.Condition()
        self.windows = 0
        self.compiling: dict[str, int] = {}  # trials on this GPU that have not reached the gate: pid
        self.beside: set[str] = set()  # of those, the ones seen during the current window

    async def arrive(self, who: str, pid: int) -> None:
        async with self.freed:
            self.compiling[who] = pid
            if self.holder is not None:
                self.beside.add(who)

    async def leave(self, who: str) -> None:
        async with self.freed:
            self.compiling.pop(who, None)
            self.freed.notify_all()

    def _prune(self) -> None:
        """Forget trials whose process died, and a holder that died or outlived its lease."""
        for who, pid in list(self.compiling.items()):
            if not alive(pid):
                del self.compiling[who]
        if self.holder and (not alive(self.holder[1]) or time.monotonic() >= self.expires):
            self.holder = None

    def _busy(self, quiet: bool) -> bool:
        self._prune()
        return self.holder is not None or (quiet and bool(self.compiling))

    async def acquire(self, who: str, pid: int, quiet: bool = False) -> float:
        """Blocks until `who` holds the gate (with `quiet`, also until no other run on this GPU is
        compiling, so launch-bound runs are timed with the CPUs to themselves); returns the seconds waited."""
        started = time.monotonic()
        async with self.freed:
            self.compiling.pop(who, None)  # it has compiled: it is here for its window
            self.freed.notify_all()
            while self._busy(quiet):
                try:
                    await asyncio.wait_for(self.freed.wait(), CHECK_S)
                except asyncio.TimeoutError:
                    pass
            self.holder, self.expires = (who, pid), time.monotonic() + self.lease_s
            self.windows += 1
            self.beside = set(self.compiling)
        return time.monotonic() - started

    async def release(self, who: str) -> int:
        """Frees the gate; returns how many other runs on this GPU were compiling during the window."""
        async with self.freed:
            if not self.holder or self.holder[0] != who:
                return 0
            self.holder = None
            self.freed.notify_all()
            return len(self.beside)

    def stats(self) -> dict:
        return {"holder": self.holder[0] if self.holder else None, "windows": self.windows,
                "compiling": sorted(self.compiling)}  # fmt: skip


def gate_name(node_id: str, gpu: int | str) -> str:
    return f"timing-gate:{node_id}:{gpu}"


def _gate(node_id: str, gpu: int | str):
    """The gate of a GPU, on that GPU's node (it checks its trials' processes there)."""
    return TimingGate.options(
        name=gate_name(node_id, gpu),
        namespace=NAMESPACE,
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote()


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
    """The context manager the training loop holds around its GPU work after the first step."""

    def __init__(self, node_id: str, gpu: int | str, who: str, quiet: bool = False):
        self.who, self.quiet, self.pid = who, quiet, os.getpid()
        self.actor = _gate(node_id, gpu)  # the driver's, when the search opened them
        ray.get(self.actor.arrive.remote(who, self.pid))
        self.waited_s = 0.0
        self.compiling_beside = 0

    def __enter__(self) -> GateClient:
        self.waited_s += ray.get(self.actor.acquire.remote(self.who, self.pid, self.quiet))
        return self

    def __exit__(self, *exc) -> None:
        self.compiling_beside = ray.get(self.actor.release.remote(self.who))

    def close(self) -> None:
        """The trial is over (also when it failed before it reached the gate)."""
        self.actor.leave.remote(self.who)
