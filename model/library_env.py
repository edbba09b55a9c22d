"""Every environment variable the product sets for a library, with which library reads it, when, and why.

Our own modules pass data through signatures. The environment is written only for a library that reads a
setting from it and offers no API for it (or reads it before an API could be called), and only here. The
module sits in model/, the lowest layer, so every layer may call it; it imports nothing but the standard
library (no torch, Triton or Ray), so calling it never imports what it configures.

| variable                        | read by                 | when                                   | set by                  |
|---------------------------------|-------------------------|----------------------------------------|-------------------------|
| TRITON_CACHE_AUTOTUNING         | Triton's autotuners     | when a kernel is defined (its import)  | keep_autotune_results   |
| TORCHINDUCTOR_CACHE_DIR         | Inductor                | at each compile                        | point_compile_caches    |
| TRITON_CACHE_DIR                | Triton                  | at each compile / autotune             | point_compile_caches    |
| TORCHINDUCTOR_COMPILE_THREADS   | Inductor                | when its compile workers start         | trial_env (trials only) |
| HYBRID_TUNER_COMPILE_CACHE      | our training loop       | as a trial starts (use_compile_cache)  | trial_env (trials only) |
| RAY_USAGE_STATS_ENABLED         | Ray                     | at ray.init                            | before_ray_init         |
| RAY_worker_niceness             | a Ray worker's core     | as the worker process starts           | trial_env (trials only) |
| RAY_AIR_NEW_OUTPUT              | Ray Tune                | at Tuner.fit                           | before_ray_init         |
| TUNE_PRINT_ALL_TRIAL_ERRORS     | Ray Tune's controller   | when it is made (each Tuner.fit)       | one_line_trial_errors   |

A value the user exported wins wherever the product only offers a default (`setdefault`).

torch writes one of them too: importing torch._dynamo (which torch does on its own, e.g. at the first
`nn.init` on the meta device) calls Inductor's `cache_dir()`, which sets TORCHINDUCTOR_CACHE_DIR to its
default (/tmp/torchinductor_<user>) where it was unset. The checks before any work build a user's model on
meta, so they run under `unchanged_compile_caches`: a variable set there would read as the user's export.

HYBRID_TUNER_COMPILE_CACHE is the one variable our own code reads: the search's compile-cache root, which
each trial keys by its own device and software before it points Inductor and Triton at it
(trainables/training/loop.py:use_compile_cache). The key cannot be known where the runtime env is made (the
driver may have no GPU), and the env is what reaches every trial process before it imports anything; a
user may also export it for `python -m trainables.train` (a config's `compile_cache` wins).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

# A compile cache's dirs (as `TrainConfig.compile_cache` lays them out) and the variable its compiler reads.
COMPILE_CACHE_VARS = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}
COMPILE_THREADS_VAR = "TORCHINDUCTOR_COMPILE_THREADS"
COMPILE_CACHE_VAR = "HYBRID_TUNER_COMPILE_CACHE"  # a search's cache root, keyed by each trial


def keep_autotune_results() -> None:
    """Before the fused kernels are imported: Triton keeps their autotune winners in its cache dir."""
    # Triton's autotuners read it when a kernel is defined (fla's, mamba_ssm's): no argument reaches them.
    os.environ.setdefault("TRITON_CACHE_AUTOTUNING", "1")


def compile_cache_dirs() -> dict[str, str]:
    """The cache dirs Inductor and Triton would use now, by dir name ("inductor", "triton"); only those set."""
    return {root: os.environ[var] for root, var in COMPILE_CACHE_VARS.items() if os.environ.get(var)}


def point_compile_caches(dirs: Mapping[str, str | Path]) -> None:
    """Points Inductor's and/or Triton's cache (`dirs`, by dir name) at a dir. Before compiling."""
    for root, path in dirs.items():
        # Both read their cache dir from the environment at each compile; neither takes it as an argument.
        os.environ[COMPILE_CACHE_VARS[root]] = str(path)


@contextmanager
def unchanged_compile_caches() -> Iterator[None]:
    """The compile cache variables as they were before, after: what torch set meanwhile (its default dir, as
    Dynamo is imported) is undone, so it is never taken for a dir the user exported."""
    before = {var: os.environ.get(var) for var in COMPILE_CACHE_VARS.values()}
    try:
        yield
    finally:
        for var, value in before.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def search_compile_cache() -> str | None:
    """The cache root a search gave its trials (None outside a search's trials, or where the user
    exported both cache dirs)."""
    return os.environ.get(COMPILE_CACHE_VAR) or None


def trial_env(cache: Path, compile_threads: int) -> tuple[dict[str, str], bool]:
    """The library variables every trial process gets (through Ray's runtime env, set before the worker
    imports anything), and whether the compile caches are `cache`'s (False: the user exported their own).
    `cache` is a root the trials key themselves (HYBRID_TUNER_COMPILE_CACHE); the user's exported cache dirs
    and compile threads win, and are passed on as they are."""
    exported = compile_cache_dirs()  # in the driver: what the user exported
    env = {COMPILE_CACHE_VARS[root]: path for root, path in exported.items()}
    if len(exported) < len(COMPILE_CACHE_VARS):  # a dir the user left to us
        env[COMPILE_CACHE_VAR] = str(cache)
    env[COMPILE_THREADS_VAR] = os.environ.get(COMPILE_THREADS_VAR, str(compile_threads))
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # each worker's Ray reads it too: no reporting from the trials
    # Ray starts its workers at nice 15: any ordinary process beside the search (nice 0) then starves the
    # trials, whose speed is what the search measures, and a user's own run of the answer runs at nice 0.
    # Ray's job supervisor sets the same for its own actor (ray.dashboard.modules.job.job_manager).
    env["RAY_worker_niceness"] = os.environ.get("RAY_worker_niceness", "0")  # noqa: SIM112 - Ray spells it so
    return env, not exported


def before_ray_init() -> None:
    """The driver's Ray settings, before ray.init: no usage stats, and Tune's older output engine."""
    # Ray reads it at ray.init (there is no init argument); a search sends nothing home.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Tune picks its output engine from it at Tuner.fit (no option does): our progress lines replace its tables.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def one_line_trial_errors() -> None:
    """No traceback per failed trial from Tune: the runner's PhaseProgress says each in one line."""
    # Tune's controller reads it when it is made (no TuneConfig/RunConfig option); 1 brings them back.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
