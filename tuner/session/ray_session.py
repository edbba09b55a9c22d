"""Where the search's Ray runs, and the driver's hold on it.

Local means local: with no `--address` (and no RAY_ADDRESS, which a Ray Job's driver is given) the search
starts a private Ray instance of its own (`ray.init(address="local")`), whatever Ray's record of the last
cluster started on the host (`ray_current_cluster`) or a running cluster says. With no address Ray itself
joins that recorded cluster, alive or dead: a stale one hung a new user's first search for 13 minutes.
Joining takes `--address HOST:PORT`, `--address auto` (the cluster on this host) or RAY_ADDRESS, and the
address is checked first, within a deadline, so an unreachable one is one line in seconds, not Ray's retries.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import ray

from model import library_env
from trainables.common.errors import EnvironmentFault, first_line
from trainables.config import ConfigError
from tuner.session import stop_signals

ASKS_TOKEN = "asks for a token"  # a GCS that refused us for want of one: it is Ray, behind token auth
REAPER = Path(__file__).with_name("reaper.py")  # run by its file: `-m` would import torch with the package
REAPER_START_S = 60.0  # psutil's import and one look: well under a second on an idle machine
CONNECT_TIMEOUT_S = 20.0  # --connect-timeout's default: a live head answers in well under a second
HOW_TO_JOIN = "--address auto or HOST:PORT joins a cluster"


@dataclass(frozen=True)
class RayTarget:
    """The Ray the search runs on: `address` None for a private local instance, else the cluster to join
    (HOST:PORT, or a ray:// client address), and where that address came from, for every line about it."""

    address: str | None = None
    source: str = "no --address"
    auto: bool = False  # found as Ray finds it: ray.init gets "auto", which also brings a local token

    @property
    def init_address(self) -> str:
        """What ray.init is given: "local", "auto" (Ray resolves the same cluster and, where token auth is
        on, loads this host's token, as it does for no explicit address) or the address."""
        return "auto" if self.auto else self.address or "local"

    @property
    def joins(self) -> bool:
        return self.address is not None

    def __str__(self) -> str:
        if not self.joins:
            return f"a private local instance ({self.source}; {HOW_TO_JOIN})"
        return f"joining the cluster at {self.address} (from {self.source})"


def ray_target(flag: str | None) -> RayTarget:
    """`--address` first (`local` is the default spelled out), then RAY_ADDRESS (what `ray job submit` and
    KubeRay give a job's driver; `local` and `auto` mean there what they mean to Ray and to --address), then
    a local instance. `auto` is resolved here, to name what it found."""
    if flag:
        return _named(flag, "--address")
    if env := os.environ.get("RAY_ADDRESS"):
        return _named(env, "RAY_ADDRESS")
    return RayTarget()


def _named(address: str, where: str) -> RayTarget:
    if address == "local":
        return RayTarget(None, f"{where} local")
    if address == "auto":
        return _auto(where)
    _check_form(address, where)
    return RayTarget(address, where)


def _check_form(address: str, where: str = "--address") -> None:
    if address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{where}: expected auto, local or HOST:PORT, got {address!r}")


def _auto(where: str = "--address") -> RayTarget:
    """What `ray.init(address="auto")` would join, found the way Ray finds it, with its source named."""
    from ray._common.utils import get_ray_address_file
    from ray._private.services import find_gcs_addresses

    env = os.environ.get("RAY_ADDRESS")
    if where == "--address" and env and env not in ("auto", "local"):
        _check_form(env, "RAY_ADDRESS")
        return RayTarget(env, "RAY_ADDRESS, asked for by --address auto", auto=True)
    record = get_ray_address_file(None)
    if os.path.exists(record):
        with open(record) as f:
            if recorded := f.read().strip():
                source = f"{where} auto: Ray's record of this host's cluster, {record}"
                return RayTarget(recorded, source, auto=True)
    if running := sorted(find_gcs_addresses()):
        return RayTarget(running[0], f"{where} auto: a Ray cluster running on this host", auto=True)
    raise EnvironmentFault(
        f"{where} auto: no Ray cluster runs on this host (start one with `ray start --head`, "
        f"or {_local_instead(where)} to run on a private local instance)"
    )


def _local_instead(source: str) -> str:
    """How to get a private local instance instead of the address from `source`: leaving --address out does
    it only where RAY_ADDRESS names no cluster (a user who passed none, RAY_ADDRESS=auto, would be told to
    leave out what they never gave); else --address local, which wins over RAY_ADDRESS."""
    env = os.environ.get("RAY_ADDRESS")
    if "RAY_ADDRESS" in source or (env and env != "local"):
        return "pass --address local (or unset RAY_ADDRESS)"
    return "leave --address out"


def check_reachable(target: RayTarget, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A Ray GCS answers at the target's address within `timeout_s`, else EnvironmentFault in one line.
    A ray:// (client) address is left to ray.init."""
    address = target.address  # None: not joining
    if address is None or address.startswith("ray://"):
        return
    deadline = time.monotonic() + timeout_s
    why = _tcp_fault(address, timeout_s) or _gcs_fault(address, deadline - time.monotonic())
    if why == ASKS_TOKEN:
        if _has_token(target):
            return
        raise EnvironmentFault(
            f"the Ray cluster at {target.address} (from {target.source}) asks for a token (Ray's token auth) "
            "and this driver has none: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or put it in "
            "~/.ray/auth_token); on the head, `ray get-auth-token` prints it"
        )
    if why:
        stale = " (that cluster is gone: `ray stop` removes its record)" if "record" in target.source else ""
        raise EnvironmentFault(
            f"cannot reach Ray at {target.address} (from {target.source}) within {timeout_s:.0f} s: {why}"
            f"{stale}; start it, pass another --address, or {_local_instead(target.source)} to run locally"
        )


def _tcp_fault(address: str, timeout_s: float) -> str | None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except TimeoutError:
        return "no answer"
    except OSError as err:
        return (err.strerror or str(err)).lower()
    return None


def _gcs_fault(address: str, timeout_s: float) -> str | None:
    """Something listens there; is it a Ray GCS? One cheap RPC; a head with token auth refusing us still
    proves it is one (ray.init then brings the token)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            # protobuf makes the module's message classes when it is imported: mypy sees none of them
            request = gcs_service_pb2.GetClusterIdRequest()  # type: ignore[attr-defined]
            stub.GetClusterId(request, timeout=max(timeout_s, 1.0))
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNAUTHENTICATED:
                return ASKS_TOKEN
            return f"no Ray GCS answered there ({err.code().name.lower()})"
    return None


def _has_token(target: RayTarget) -> bool:
    """Whether ray.init will bring a token: RAY_AUTH_MODE=token with one to load, or (for `auto`, where Ray
    turns token auth on by itself) a token on this host."""
    from ray._private.authentication.authentication_token_setup import AuthenticationTokenLoader

    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        return False
    if mode is None and not target.auto:
        return False  # Ray turns token auth on by itself only for a cluster it found, not one it was named
    return AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)


def connect(target: RayTarget, env: dict[str, str], dashboard: bool = False) -> str | None:
    """ray.init for the target; the dashboard's URL when one was started here. A SIGTERM while Ray starts
    (Ray's own handler exits with 15) is an interrupt like any other: exit 130, resumable."""
    library_env.before_ray_init()
    try:
        context = ray.init(
            address=target.init_address,
            runtime_env={"env_vars": env},
            log_to_driver=False,
            logging_level=logging.ERROR,
            include_dashboard=None if target.joins else dashboard,  # None: Ray's default
        )
    except SystemExit as stop:
        if stop.code == signal.SIGTERM:
            raise KeyboardInterrupt("stopped by SIGTERM") from None
        raise
    except (ConnectionError, RuntimeError, ValueError) as err:
        doing = f"join Ray at {target.address} (from {target.source})" if target.joins else "start Ray here"
        raise EnvironmentFault(f"cannot {doing}: {first_line(err)}") from None
    return context.dashboard_url if dashboard and not target.joins else None


@dataclass
class RaySession:
    """The driver's Ray: joined (the search only disconnects) or started here, when every process it
    brought up ends with the search, whatever ended it: after a crash, Ray's dashboard and runtime-env
    agents can outlive ray.shutdown()."""

    target: RayTarget | None = None
    others: frozenset[int] = frozenset()  # the driver's descendants before Ray started: not Ray's
    reaper: subprocess.Popen | None = (
        None  # ends the local Ray when the driver dies (tuner/session/reaper.py)
    )
    lifeline: int | None = None  # the reaper's pipe: this end closes when the driver ends, however

    def start(
        self, target: RayTarget, env: dict[str, str], *, dashboard: bool, timeout_s: float
    ) -> str | None:
        """Check the address, then start or join Ray. Returns the dashboard's URL when one was started here."""
        self.target = target
        check_reachable(target, timeout_s)
        self.others = frozenset(p.pid for p in _descendants())
        if not target.joins:  # a Ray of its own: it must end with the driver, however that ends
            self._start_reaper()
        url = connect(target, env, dashboard)
        signal.signal(signal.SIGTERM, terminated)  # ray.init put its own in: it ends at once, no clean-up
        return url

    def stop(self) -> None:
        local = self.target is not None and not self.target.joins
        started = [p for p in _descendants() if p.pid not in self.others] if local else []
        ray.shutdown()
        _, alive = psutil.wait_procs(started, timeout=5)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)
        if self.lifeline is not None:
            os.close(self.lifeline)  # the reaper finds nothing left, and ends
            self.lifeline = None
        if self.reaper is not None:  # None also where the pipe was made but the reaper did not start
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.reaper.wait(timeout=10)
            if self.reaper.stdout is not None:
                self.reaper.stdout.close()
            self.reaper = None

    def _start_reaper(self) -> None:
        """Start the reaper and wait until it watches: a Ray process started before would outlive a SIGKILL."""
        read, self.lifeline = os.pipe()  # not inheritable: no Ray process holds the write end open
        self.reaper = subprocess.Popen(
            [sys.executable, str(REAPER), str(os.getpid()), *map(str, self.others)],
            stdin=read,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        os.close(read)
        said = self.reaper.stdout
        assert said is not None  # stdout=PIPE
        ready, _, _ = select.select([said], [], [], REAPER_START_S)
        if not ready or said.readline().strip() != b"ready":
            raise EnvironmentFault(
                f"the reaper (tuner/session/reaper.py) did not start in {REAPER_START_S:.0f} s"
            )


def terminated(signum: int, frame: object) -> None:
    """SIGTERM (a job's end, `kill`) stops the search as Ctrl-C does: resumable, Ray taken down."""
    stop_signals.note(signum)  # a phase that ends on it is "interrupted", not a failure of Tune's
    raise KeyboardInterrupt("stopped by SIGTERM")


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)
