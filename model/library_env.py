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
| RAY_USAGE_STATS_ENABLED         | Ray                     | at ray.init                            | before_ray_init         |
| RAY_AIR_NEW_OUTPUT              | Ray Tune                | at Tuner.fit                           | before_ray_init         |
| TUNE_PRINT_ALL_TRIAL_ERRORS     | Ray Tune's controller   | when it is made (each Tuner.fit)       | one_line_trial_errors   |

A value the user exported wins wherever the product only offers a default (`setdefault`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# A compile cache's dirs (as `TrainConfig.compile_cache` lays them out) and the variable its compiler reads.
COMPILE_CACHE_VARS = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}
COMPILE_THREADS_VAR = "TORCHINDUCTOR_COMPILE_THREADS"


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


def trial_env(cache: Path, compile_threads: int) -> tuple[dict[str, str], bool]:
    """The library variables every trial process gets (through Ray's runtime env, set before the worker
    imports anything), and whether the compile caches are `cache`'s (False: the user exported their own).
    The user's exported cache dirs and compile threads win."""
    own = not any(os.environ.get(var) for var in COMPILE_CACHE_VARS.values())
    env = {var: os.environ.get(var, str(cache / root)) for root, var in COMPILE_CACHE_VARS.items()}
    env[COMPILE_THREADS_VAR] = os.environ.get(COMPILE_THREADS_VAR, str(compile_threads))
    env["RAY_USAGE_STATS_ENABLED"] = "0"  # each worker's Ray reads it too: no reporting from the trials
    return env, own


def before_ray_init() -> None:
    """The driver's Ray settings, before ray.init: no usage stats, and Tune's older output engine."""
    # Ray reads it at ray.init (there is no init argument); a search sends nothing home.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Tune picks its output engine from it at Tuner.fit (no option does): our progress lines replace its tables.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


def one_line_trial_errors() -> None:
    """No traceback per failed trial from Tune: the runner's LedgerCallback says each in one line."""
    # Tune's controller reads it when it is made (no TuneConfig/RunConfig option); 1 brings them back.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
