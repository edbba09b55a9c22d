"""The Ray Tune function trainable: a thin wrapper that runs the training loop and reports its metrics.

The tuner passes the baseline training config as `config["train"]` and the trial's knobs as the other
top-level keys (so they show in Ray's tables and the dashboard); the trainable needs nothing from the tuner. Interim reports let Ray stop clearly slow
trials; the last report carries the run's full result (status, speed, loss, memory, telemetry window).
"""

from __future__ import annotations

from typing import Any

import ray
from ray import tune

from trainables.config import ConfigError, make_config
from trainables.loop import WINDOW_KEYS, train

# The key under `config["train"]` where the tuner labels a trial (its case and repeat); not a knob.
LABELS = "_labels"


def _placement() -> dict[str, Any]:
    """Where this trial runs, in the ids the telemetry actor uses (Ray node id, physical GPU index)."""
    ctx = ray.get_runtime_context()
    gpu_ids = ray.get_gpu_ids()
    return {"node_id": ctx.get_node_id(), "gpu": int(gpu_ids[0]) if gpu_ids else None}


def train_trial(config: dict[str, Any]) -> None:
    placement = _placement()
    try:
        knobs = {k: v for k, v in config.items() if k != "train"}
        base = {k: v for k, v in config["train"].items() if k != LABELS}
        cfg = make_config({**base, **knobs})
    except ConfigError as err:
        tune.report({"status": "error", "error": str(err), "tokens_per_s": 0.0, "done": True, **placement})
        return

    def interim(metrics: dict[str, Any]) -> None:
        if not metrics.get("done"):
            window = {k: metrics.get(k) for k in WINDOW_KEYS}
            tune.report(
                {
                    "status": "running",
                    "tokens_per_s": metrics.get("tokens_per_s") or 0.0,
                    **window,
                    **placement,
                }
            )

    result = train(cfg, report=interim)
    result.pop("history", None)
    # A failed run reports 0 tok/s so the search learns to avoid its region.
    result["tokens_per_s"] = result["tokens_per_s"] if result["status"] == "ok" else 0.0
    cuda_index = result.pop("gpu")
    tune.report(
        {
            **result,
            **placement,
            "gpu": placement["gpu"] if placement["gpu"] is not None else cuda_index,
            "done": True,
        }
    )
