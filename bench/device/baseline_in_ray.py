"""Is the seed baseline slower inside a Ray Tune trial than in a plain process? (run O, one H100: 13,982
tok/s in the search's re-measure, 137-154 ms steps, against 16,461 tok/s, 124 ms, for the same config run
alone with `python -m trainables.train`; one CPU core busy in both.)

    python bench/device/baseline_in_ray.py --data tinyshakespeare.txt [--config configs/default.yaml]

Runs the config's first 300 steps three times, one after another on an otherwise idle machine: in this
process's main thread, as a one-trial Ray Tune experiment through the search's own trainable
(trainables.trainable.train_trial, 2 CPUs and the GPU, as a re-measure run asks), then in the main thread
again. Prints one JSON line per run: where, tok/s, median and p90 step ms."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from trainables.config import load_config  # noqa: E402
from trainables.loop import train  # noqa: E402
from trainables.spec import TrialSpec  # noqa: E402

FIELDS = ("tokens_per_s", "step_ms_median", "step_ms_p90", "cpu_own_cores", "cpu_threads")


def _line(where: str, metrics: dict) -> None:
    print(json.dumps({"where": where, **{k: metrics.get(k) for k in FIELDS}}), flush=True)


def in_ray(cfg, gpus: int) -> dict:
    import ray
    from ray import tune

    from trainables.trainable import train_trial

    ray.init(include_dashboard=False, log_to_driver=False)
    resources = {"cpu": 2, "gpu": 1} if gpus else {"cpu": 2}
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(train_trial, timing_gate=None), resources),
        param_space=TrialSpec.of(cfg.model_dump()).as_tune(),
        run_config=tune.RunConfig(storage_path="/tmp/baseline_in_ray", verbose=0),
    )
    metrics = tuner.fit()[0].metrics
    ray.shutdown()
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    cfg = load_config(args.config, [f"max_steps={args.steps}"], data=args.data)
    gpus = int(torch.cuda.is_available() and cfg.device != "cpu")
    _line("main thread", train(cfg).metrics())
    _line("ray trial", in_ray(cfg, gpus))
    _line("main thread", train(cfg).metrics())


if __name__ == "__main__":
    main()
