"""Where does the seed baseline run slower? (one H100: 13,982 tok/s in the search's re-measure,
137-154 ms steps, against 16,461 tok/s, 124 ms, for the same config run alone with
`python -m trainables.train`; one CPU core busy in both; others' CPU load 0.54 cores in the search, 0.03
alone.)

    python bench/device/baseline_where.py --data tinyshakespeare.txt [--config configs/default.yaml]

On GPU 0 of an otherwise idle machine, one after another, twice over (so drift shows): the config's first
`--steps` steps in this process's main thread; the same with one, then four, other processes spinning on
the CPU (a busy driver or a sibling hyperthread); as a one-trial Ray Tune experiment through the search's
own trainable (trainables.trainable.train_trial, 2 CPUs and the GPU, as a re-measure run asks); and the
re-measure's own shape in the main thread (40 steps, 10 untimed, a log point every 7). Prints one JSON line
per run: the condition, tok/s, median and p90 step ms, and the CPU load of this process and of others."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from trainables.config import load_config  # noqa: E402
from trainables.spec import TrialSpec  # noqa: E402
from trainables.training.loop import train  # noqa: E402

FIELDS = ("tokens_per_s", "step_ms_median", "step_ms_p90", "cpu_own_cores", "cpu_others_cores", "cpu_threads")
REMEASURE_SHAPE = ["max_steps=40", "log_interval=7", "timing_warmup_steps=10"]  # the search's re-measure rows


def _line(where: str, metrics: dict) -> None:
    print(json.dumps({"where": where, **{k: metrics.get(k) for k in FIELDS}}), flush=True)


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def beside_spinners(cfg, count: int) -> dict:
    """The run in the main thread while `count` other processes keep a CPU core busy each."""
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(count)]
    for process in spinners:
        process.start()
    time.sleep(1.0)
    try:
        return train(cfg).metrics()
    finally:
        stop.set()
        for process in spinners:
            process.join()


def in_ray(cfg, gpus: int) -> dict:
    import ray
    from ray import tune

    from trainables.trainable import train_trial

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    resources = {"cpu": 2, "gpu": 1} if gpus else {"cpu": 2}
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(train_trial, timing_gate=None), resources),
        param_space=TrialSpec.of(cfg.model_dump()).as_tune(),
        run_config=tune.RunConfig(storage_path="/tmp/baseline_where", verbose=0),
    )
    metrics = tuner.fit()[0].metrics
    ray.shutdown()
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spinners", default="1,4", help="comma-separated counts; empty for none")
    args = parser.parse_args()
    data = str(Path(args.data).resolve())  # a Ray trial runs in its own working directory
    cfg = load_config(args.config, [f"max_steps={args.steps}"], data=data)
    short = load_config(args.config, REMEASURE_SHAPE, data=data)
    spinners = [int(count) for count in args.spinners.split(",") if count]
    gpus = int(torch.cuda.is_available() and cfg.device != "cpu")
    for _ in range(args.rounds):
        _line("main thread", train(cfg).metrics())
        for count in spinners:
            _line(f"{count} spinner(s) beside", beside_spinners(cfg, count))
        _line("ray trial", in_ray(cfg, gpus))
        for _ in range(3):
            _line("main thread, re-measure shape", train(short).metrics())


if __name__ == "__main__":
    main()
