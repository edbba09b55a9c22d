"""What fits in memory, read from the batch probe's findings (tuner/state/records.py:ProbedBatch), and the one
spelling of a config's micro-batch. What must fit is the forward batch (the micro-batch, or the whole batch:
TrainConfig.forward_batch) at the config's precision and activation-checkpointing setting. The probe runs
only the setting that keeps the most and the one that keeps the least; another setting is bounded by what
we know of it without interpolating: activation_checkpointing k recomputes the k-th, 2k-th, ... of n equal
blocks, floor(n / k) of them, so a smaller k > 0 never keeps more, and a batch that did not fit where fewer
activations are kept does not fit here either. Read by the space's bounds (tuner/space/domains.py) and the screen's
proposal filter (tuner/space/searcher.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainables.config import TrainConfig
from trainables.config_fields import graphs_overwrite
from trainables.micro_batches import forward_batch, forwards_per_step, splits
from tuner.state.hardware import ProbedBatch


def keeps_at_most(probed_k: int, k: int) -> bool:
    """Whether checkpointing every `probed_k`-th block keeps at most the activations every `k`-th does (0: off):
    at least as many blocks recomputed, floor(n / probed_k) >= floor(n / k) for every n."""
    return k == 0 or 0 < probed_k <= k


def largest_forward(probed: ProbedBatch, checkpointing: int) -> int | None:
    """The largest forward batch a config at `checkpointing` can fit, by the probe: the least found at the
    probed settings that keep at most what it keeps; None when every probed setting keeps more (no bound)."""
    found = {probed.checkpointing: probed.batch, **{k: p.batch for k, p in probed.checkpointed.items()}}
    if len(found) == 1:
        return probed.batch  # checkpointing not searched: every config runs at the setting probed
    bounds = [batch for k, batch in found.items() if keeps_at_most(k, checkpointing)]
    return min(bounds) if bounds else None


def largest_anywhere(probed: Mapping[str, ProbedBatch]) -> int:
    """The largest forward batch the probe fit at any precision and setting: the space's bound."""
    return max(max([p.batch, *(c.batch for c in p.checkpointed.values())]) for p in probed.values())


def normalized(config: Mapping[str, Any], base: TrainConfig) -> dict[str, Any]:
    """`config` with a micro_batch of at least its batch spelled None: both run the whole batch in one pass
    (no accumulation), so they are one config to the screen's distinctness and to the ledger."""
    micro, batch = config.get("micro_batch"), config.get("batch_size", base.batch_size)
    if micro is None or batch is None or micro < batch:
        return dict(config)
    return {**config, "micro_batch": None}


@dataclass(frozen=True)
class BatchFit:
    """The screen's rules for a proposal's batch: one spelling per config, no micro_batch below its batch that
    does not divide it, and no config whose forward batch the probe found cannot fit at its precision and
    checkpointing setting."""

    base: TrainConfig  # the values a proposal leaves out: the baseline's
    probed: Mapping[str, ProbedBatch] = field(default_factory=dict)  # precision -> the probe's finding

    def normalized(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return normalized(config, self.base)

    def refusal(self, config: Mapping[str, Any]) -> str | None:
        """Why `config` cannot run or cannot fit, in one line; None when it may."""
        values = {**self.base.model_dump(), **config}
        if not splits(values["batch_size"], values.get("micro_batch")):
            # A space's product pairs every batch with every micro-batch (batch_size [12, 16] x micro_batch
            # [8]): the trial would refuse 12 in 8s (TrainConfig), so it is refused here, at no cost.
            return (
                f"refused batch_size={values['batch_size']} micro_batch={values['micro_batch']}: a micro_batch "
                "below the batch must divide it"
            )
        forwards = forwards_per_step(
            values["batch_size"], values.get("micro_batch"), values.get("grad_accum", 1)
        )
        if why := graphs_overwrite(values.get("compile", "none"), forwards):
            return (
                f"refused compile={values['compile']}: {why}"  # TrainConfig's rule: the trial would refuse it
            )
        precision = values.get("precision")
        found = None if precision is None else self.probed.get(precision)
        if found is None:
            return None
        k = int(values.get("activation_checkpointing") or 0)
        largest, forward = (
            largest_forward(found, k),
            forward_batch(values["batch_size"], values.get("micro_batch")),
        )
        if largest is None or forward <= largest:
            return None
        probed_k = k == found.checkpointing or k in found.checkpointed or len(found.checkpointed) == 0
        where = "at that setting" if probed_k else "at a setting that keeps no more activations"
        return (
            f"refused batch_size={values['batch_size']} micro_batch={values.get('micro_batch')} "
            f"({values['precision']}, activation_checkpointing={k}): a forward of {forward} is over "
            f"{largest}, the largest the batch probe fit {where}"
        )


# What the probe sets itself: a user's probe setting cannot name them.
PROBE_KEYS = frozenset({"batch_size", "micro_batch", "precision", "max_steps", "out_dir"})


def probe_case(base: Mapping[str, Any], batch: int, precision: str) -> dict[str, Any]:
    """The batch probe's run (its shape in tuner/runs/shapes.py): its Ray task has the baseline as a dict."""
    return {
        **base,
        "batch_size": batch,
        "micro_batch": None,  # the whole batch in one forward: the size probed is the micro-batch
        "precision": precision,
        "max_steps": 2,
        "timing_warmup_steps": 1,
        "log_interval": 1,
        "eval_interval": 0,
        "eval_batch_size": 1,
        "eval_tokens": base.get("seq_len", 256),
        "out_dir": None,
    }
