"""Where does a launch-bound run lose speed inside the search? The seed baseline in the re-measure's window
shape (10 warm-up + 30 timed steps, a log point every 7), each run a fresh process, modes interleaved:
  plain   python process, training in the main thread (what `python -m trainables.train` does)
  thread  the same, training in a second thread with OMP_NUM_THREADS=2 (a Tune trial's threading, no Ray)
  tune    a Ray Tune trial of the search's trainable (cpu 2, gpu 1) on a fresh local Ray
  bgplain plain, while another process runs Ray + an idle Tune trial (the search driver's background load)
  (ab2 adds plain with OMP_NUM_THREADS=2, and thread without it)
Usage, from the repository root with tinyshakespeare.txt there: python bench/launch_env_ab.py MODE
prints one line "AB {json}"; docs/results/launch-bound-env-h100/ab*.sh are the loops that ran it.
"""

import json
import os
import sys
import threading
import time

MODE = sys.argv[1]
OVER = ["max_steps=40", "log_interval=7", "eval_interval=0", "eval_tokens=16384"]


def cfg_dict():
    from trainables.config import load_config

    return load_config("configs/default.yaml", OVER, data=os.path.abspath("tinyshakespeare.txt")).model_dump(
        mode="json"
    )


def plain():
    from trainables.config import make_config
    from trainables.training.loop import train

    return train(make_config(cfg_dict())).tokens_per_s


def in_thread():
    box = {}
    t = threading.Thread(target=lambda: box.update(v=plain()))
    t.start()
    t.join()
    return box["v"]


def tune_trial():
    import ray
    from ray import tune

    from trainables.trainable import train_trial

    ray.init(address="local", num_cpus=16, num_gpus=1, include_dashboard=False, log_to_driver=False)
    res = tune.Tuner(
        tune.with_resources(train_trial, {"cpu": 2, "gpu": 1}),
        param_space={"train": cfg_dict()},
        tune_config=tune.TuneConfig(num_samples=1),
    ).fit()
    v = [r.metrics.get("tokens_per_s") for r in res][0]
    ray.shutdown()
    return v


def background():
    """Ray + Tune with one idle CPU trial, for as long as the experiment runs."""
    import ray
    from ray import tune

    ray.init(address="local", num_cpus=16, num_gpus=1, include_dashboard=False, log_to_driver=False)

    def idle(config):
        for _ in range(900):
            time.sleep(1)
            tune.report({"x": 1})

    tune.Tuner(tune.with_resources(idle, {"cpu": 2}), tune_config=tune.TuneConfig(num_samples=1)).fit()


if MODE == "background":
    background()
else:
    t0 = time.time()
    v = {"plain": plain, "thread": in_thread, "tune": tune_trial, "bgplain": plain}[MODE]()
    print(
        "AB " + json.dumps({"mode": MODE, "tokens_per_s": v, "wall_s": round(time.time() - t0, 1)}),
        flush=True,
    )
