"""Telling a trial lost with its node from one that failed on its own.

On a cluster a node can die (preempted, unplugged, out of memory): its trials' workers die with it, which
is no fault of the trials. The runner gives such a trial no row and reruns it elsewhere (at most
NODE_LOSS_RERUNS times); a worker that died on a live node is the trial's own failure.
"""

from __future__ import annotations

import socket

import ray
from ray.exceptions import RayActorError, RayTaskError

NODE_LOSS_RERUNS = 2  # fresh experiments a phase runs for trials lost with their node, before it gives up


def died_with_node(error: BaseException, node_id: str | None) -> bool:
    """Whether a trial's worker died because its node did: not the trial's fault, so it reruns elsewhere."""
    if isinstance(error, RayTaskError) and isinstance(error.cause, RayActorError):
        error = error.cause
    if not isinstance(error, RayActorError):
        return False
    return "its node has died" in str(error) or node_gone(node_id)  # the GCS's words, once it knows


def node_gone(node_id: str | None) -> bool:
    """Whether a node has died: the GCS says so, or its raylet takes no connection. The GCS notices a dead
    node only after missing its heartbeats, seconds after the node's workers (and their trials) died."""
    node = next((n for n in ray.nodes() if node_id and n["NodeID"] == node_id), None)
    if node is None or not node["Alive"]:
        return node is not None
    try:
        socket.create_connection((node["NodeManagerAddress"], node["NodeManagerPort"]), timeout=3).close()
    except OSError:
        return True
    return False
