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
from collections.abc import Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

LEASE_S = 300.0  # longer than any timed window of a speed run; only a stuck holder reaches it
CHECK_S = 1.0  # how often a waiter looks again for trials that died
BESIDE_CHECK_S = 0.2  # how often a beside run asks whether a window wants its GPU: the most a window waits
BESIDE_SILENT_S = 30.0  # a beside run not heard from for this long is stuck: windows stop waiting for it
NAMESPACE = "hybrid-tuner"
GATE_PREFIX = "timing-gate:"
RETIRED_TRIES = 3
LEAVE_WAIT_S = 5.0


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

    def __init__(self, lease_s: float = LEASE_S, silent_s: float = BESIDE_SILENT_S):
        self.lease_s, self.silent_s = lease_s, silent_s
        self.holder: tuple[str, int] | None = None  # (trial, pid)
        self.expires = 0.0
        self.freed = asyncio.Condition()
        self.windows = 0
        self.compiling: dict[str, int] = {}  # trials on this GPU that have not reached the gate: pid
        self.beside: set[str] = set()  # of those, the ones seen during the current window
        self.wanting = 0  # windows waiting to be granted
        self.training_beside: dict[str, tuple[int, float]] = {}  # beside runs not parked: (pid, last heard)
        self.clients: dict[str, int] = {}  # runs that arrived and have not left: pid

    async def arrive(self, who: str, pid: int) -> None:
        async with self.freed:
            self.clients[who] = pid
            self.compiling[who] = pid
            if self.holder is not None:
                self.beside.add(who)

    async def leave(self, who: str) -> None:
        async with self.freed:
            self.clients.pop(who, None)
            self.compiling.pop(who, None)
            self.training_beside.pop(who, None)
            self.freed.notify_all()

    def _prune(self) -> None:
        """Forget trials whose process died, beside runs that died or went silent, and a holder that died or
        outlived its lease."""
        for runs in (self.clients, self.compiling):
            for who, pid in list(runs.items()):
                if not alive(pid):
                    del runs[who]
        for who, (pid, heard) in list(self.training_beside.items()):
            if not alive(pid) or time.monotonic() - heard > self.silent_s:
                del self.training_beside[who]
        if self.holder and (not alive(self.holder[1]) or time.monotonic() >= self.expires):
            self.holder = None

    def _window_pending(self) -> bool:
        self._prune()
        return self.holder is not None or self.wanting > 0

    def _busy(self, quiet: bool) -> bool:
        self._prune()
        return self.holder is not None or bool(self.training_beside) or (quiet and bool(self.compiling))

    async def acquire(self, who: str, pid: int, quiet: bool = False) -> float:
        """Blocks until `who` holds the gate (with `quiet`, also until no other run on this GPU is
        compiling, so launch-bound runs are timed with the CPUs to themselves); returns the seconds waited."""
        started = time.monotonic()
        async with self.freed:
            self.compiling.pop(who, None)  # it has compiled: it is here for its window
            self.freed.notify_all()
            self.wanting += 1  # beside runs park at their next step
            try:
                await self._wait_while(lambda: self._busy(quiet))
            finally:
                self.wanting -= 1
            self.holder, self.expires = (who, pid), time.monotonic() + self.lease_s
            self.windows += 1
            self.beside = set(self.compiling)
        return time.monotonic() - started

    async def _wait_while(self, busy: Callable[[], bool]) -> None:
        """Inside `self.freed`: until `busy()` is false, looking again on every change and every CHECK_S."""
        while busy():
            try:
                await asyncio.wait_for(self.freed.wait(), CHECK_S)
            except asyncio.TimeoutError:
                pass

    async def window_wanted(self, who: str, pid: int) -> bool:
        """A beside run between steps: whether a window holds or wants the GPU (it should then park). Its
        first call ends its compile (as `acquire` does a timed run's)."""
        async with self.freed:
            self.compiling.pop(who, None)
            self.training_beside[who] = (pid, time.monotonic())
            self.freed.notify_all()
            return self._window_pending()

    async def park(self, who: str, pid: int) -> float:
        """A beside run whose GPU work is done: blocks until no window holds or wants the GPU; returns the
        seconds parked."""
        started = time.monotonic()
        async with self.freed:
            self.training_beside.pop(who, None)
            self.freed.notify_all()
            await self._wait_while(self._window_pending)
            self.training_beside[who] = (pid, time.monotonic())
        return time.monotonic() - started

    async def release(self, who: str) -> int:
        """Frees the gate; returns how many other runs on this GPU were compiling during the window."""
        async with self.freed:
            if not self.holder or self.holder[0] != who:
                return 0
            self.holder = None
            self.freed.notify_all()
            return len(self.beside)

    async def retire_if_idle(self) -> bool:
        """Ends this gate unless a live run has arrived and not left (False then). Gates are detached (see
        `_gate`), so without this they would outlive the search on a cluster that outlives it; a later run
        on the GPU makes a new one."""
        async with self.freed:
            self._prune()
            if self.clients or self.holder or self.wanting:
                return False
            ray.actor.exit_actor()  # inside the lock: no run arrives between the look and the end
        return True

    def stats(self) -> dict:
        return {"holder": self.holder[0] if self.holder else None, "windows": self.windows,
                "compiling": sorted(self.compiling), "beside": sorted(self.training_beside)}  # fmt: skip


def gate_name(node_id: str, gpu: int | str) -> str:
    return f"{GATE_PREFIX}{node_id}:{gpu}"


def _gate(node_id: str, gpu: int | str):
    """The gate of a GPU, on that GPU's node (it checks its trials' processes there). Detached: it belongs
    to the GPU, not to whoever asked first. Ray numbers a node's GPUs by its CUDA_VISIBLE_DEVICES
    (`CUDA_VISIBLE_DEVICES=1` gives id 1 on a one-GPU node), which the driver cannot see for every node, so a
    trial may be the first to ask for its GPU's gate; owned by that trial, the gate died with its worker and
    took every other trial of the GPU with it (ActorDiedError: 7 of 9 re-measure runs of the 94M search on
    GPU 1 of a 2x H200 host, twice). Two searches on one cluster share it, as they share the GPU."""
    # mypy keeps a decorated class's own type: @ray.remote made TimingGate an ActorClass, which has options
    return TimingGate.options(  # type: ignore[attr-defined]
        name=gate_name(node_id, gpu),
        namespace=NAMESPACE,
        get_if_exists=True,
        lifetime="detached",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote()


def _arrived(node_id: str, gpu: int | str, who: str, pid: int):
    """The GPU's gate, with `who` arrived at it. A gate retiring (`retire_if_idle`, another search's end)
    as this run found it is made anew: its name is free once Ray has seen it end."""
    for attempt in range(RETIRED_TRIES):
        actor = _gate(node_id, gpu)
        try:
            ray.get(actor.arrive.remote(who, pid))
            return actor
        except RayActorError:
            if attempt == RETIRED_TRIES - 1:
                raise
            time.sleep(0.5)


def retire_idle_gates() -> int:
    """At a search's end: every timing gate on the cluster that no live run uses ends (another search's
    stay). Returns how many ended."""
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == NAMESPACE and a["name"].startswith(GATE_PREFIX)]  # fmt: skip
    asked = []
    for name in names:
        try:
            asked.append(ray.get_actor(name, namespace=NAMESPACE).retire_if_idle.remote())
        except ValueError:  # ended meanwhile
            continue
    if not asked:
        return 0
    answered, _ = ray.wait(asked, num_returns=len(asked), timeout=10)
    return sum(_ended(ref) for ref in answered)


def _ended(ref) -> bool:
    try:
        return bool(ray.get(ref))
    except RayActorError:  # the answer of a gate that ended
        return True


def _leave(actor, who: str) -> None:
    """Waits for the gate to hear it (a search ending next retires the gates no run is at); a gate that is
    gone has nothing to forget."""
    try:
        ray.get(actor.leave.remote(who), timeout=LEAVE_WAIT_S)
    except (RayActorError, GetTimeoutError):
        pass


def open_gates() -> list:
    """One gate per GPU index of every alive node, made before any trial asks (a GPU Ray numbers otherwise
    gets its gate from its first trial; either way it is detached, see `_gate`). Returns the handles."""
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
        self.actor = _arrived(node_id, gpu, who, self.pid)  # the driver's, when the search opened them
        self.waited_s = 0.0
        self.compiling_beside = 0

    def __enter__(self) -> GateClient:
        self.waited_s += ray.get(self.actor.acquire.remote(self.who, self.pid, self.quiet))
        return self

    def __exit__(self, *exc) -> None:
        self.compiling_beside = ray.get(self.actor.release.remote(self.who))

    def close(self) -> None:
        """The trial is over (also when it failed before it reached the gate)."""
        _leave(self.actor, self.who)


class BesideClient:
    """The step hook of a run trained beside timed ones: every BESIDE_CHECK_S it asks its GPU's gate whether
    a window wants the GPU; if so it waits for its own queued GPU work (`sync`) and parks until the window
    is over. `waited_s`: the seconds it gave to windows."""

    def __init__(self, node_id: str, gpu: int | str, who: str, sync: Callable[[], None]):
        self.who, self.pid, self.sync = who, os.getpid(), sync
        self.actor = _arrived(node_id, gpu, who, self.pid)  # compiling until its first step is done
        self.waited_s = 0.0
        self.next_check = 0.0

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + BESIDE_CHECK_S
        if ray.get(self.actor.window_wanted.remote(self.who, self.pid)):
            self.sync()
            self.waited_s += ray.get(self.actor.park.remote(self.who, self.pid))

    def close(self) -> None:
        _leave(self.actor, self.who)
