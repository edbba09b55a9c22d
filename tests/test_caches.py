"""Compile caches that outlive a search (issue 34, item 2): one root (the user's cache dir by default,
--cache-dir or search.cache_dir), one subdir per key (device and software), computed where the run executes.

Real Inductor on the CPU compiles the toy workload (seconds): a run in a new process with the same key finds
the graphs an earlier run compiled, a run whose key differs (a faked version) compiles into its own subdir
and leaves the first key's entries as they were, and a cache dir the user exported wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model import library_env
from tests.test_train import toy_config
from tests.user_env import user_env
from trainables.common.exit_codes import Exit
from trainables.config import ConfigError, dump_config
from trainables.training import compile_cache
from trainables.training.compile_cache import KEY_FILE, CacheKey, manifest
from trainables.training.loop import train
from tuner import search
from tuner.config import load_search_config
from tuner.state import caches

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
CACHE_VARS = (*library_env.COMPILE_CACHE_VARS.values(), library_env.COMPILE_CACHE_VAR)


def toy(**overrides):
    """The toy workload compiled (Inductor on the CPU): a graph in seconds, for the cache to keep."""
    return toy_config(tokens=4 * 16 * 16, compile="default", **overrides)


@pytest.fixture
def no_cache_env(monkeypatch):
    """No cache dir exported and no search's root: each test sets what it means (restored after)."""
    for var in CACHE_VARS:
        monkeypatch.delenv(var, raising=False)
    yield
    for var in CACHE_VARS:  # point_compile_caches writes them; monkeypatch restores only what it set
        monkeypatch.delenv(var, raising=False)


def entries(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root`: its size and mtime, to show nothing in it was touched."""
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def run_in_new_process(cfg_path: Path, out: Path) -> dict:
    env = {
        **user_env(),
        "PYTHONPATH": os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH")))),
    }
    for var in CACHE_VARS:
        env.pop(var, None)
    done = subprocess.run(
        [sys.executable, "-m", "trainables.train", "--config", str(cfg_path), "--out", str(out), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_process_finds_the_graphs_in_the_kept_cache_and_another_key_leaves_them_alone(
    tmp_path, no_cache_env, monkeypatch
):
    """One cold compile for both rules (a compile is most of this test): the root it filled is then read warm
    by a new process, and missed by a run whose key differs."""
    root = tmp_path / "cache"
    first = train(toy(compile_cache=str(root), out_dir=str(tmp_path / "out-a")), log=None)
    assert (first.status, first.compile_cache_use) == ("ok", "miss")
    key = mine = CacheKey.here("auto")
    assert json.loads((root / key.name / KEY_FILE).read_text()) == key.as_json()
    assert [p for p in manifest(root / key.name / "inductor") if p.startswith("fxgraph/")]

    # best.yaml's run: another process, another OUT, the same root: warm
    dump_config(toy(compile_cache=str(root)), tmp_path / "best.yaml")
    second = run_in_new_process(tmp_path / "best.yaml", tmp_path / "out-b")
    assert (second["status"], second["compile_cache_use"]) == ("ok", "hit")
    assert [p.name for p in root.iterdir()] == [key.name]  # one machine, one key

    # another key (as after an upgrade) misses: nothing of the first key is read, nor touched
    cfg = toy(compile_cache=str(root))
    before = entries(root / mine.name)

    upgraded = {**compile_cache.installed_versions(), "triton": "99.0.0"}  # as after an upgrade
    monkeypatch.setattr(compile_cache, "installed_versions", lambda: upgraded)
    other = CacheKey.here("auto")
    assert other.name != mine.name and other.device == mine.device
    assert train(cfg, log=None).compile_cache_use == "miss"  # nothing of the first key was read

    assert entries(root / mine.name) == before
    assert json.loads((root / other.name / KEY_FILE).read_text())["versions"]["triton"] == "99.0.0"
    assert [p for p in manifest(root / other.name / "inductor") if p.startswith("fxgraph/")]


def test_a_cache_dir_the_user_exported_wins_over_the_searchs_root(tmp_path, no_cache_env, monkeypatch):
    theirs, root = tmp_path / "theirs", tmp_path / "ours"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(theirs))
    env, own = library_env.trial_env(root, 1)
    assert not own and env["TORCHINDUCTOR_CACHE_DIR"] == str(theirs)
    assert env[library_env.COMPILE_CACHE_VAR] == str(root)  # Triton's, which they left to us

    for var, value in env.items():  # a trial's process: Ray's runtime env
        monkeypatch.setenv(var, value)
    assert train(toy(), log=None).compile_cache_use == "miss"
    key = CacheKey.here("auto")
    assert [p for p in manifest(theirs) if p.startswith("fxgraph/")], "the graphs went to their dir"
    assert not manifest(root / key.name / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == str(root / key.name / "triton")

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "theirs-triton"))
    env, own = library_env.trial_env(root, 1)
    assert not own and library_env.COMPILE_CACHE_VAR not in env  # both theirs: no root to key


def test_the_search_keeps_its_caches_in_the_users_cache_dir_unless_told(
    tmp_path, no_cache_env, monkeypatch, capsys
):
    monkeypatch.setenv("TUNER_CACHE_DIR", str(tmp_path / "user"))
    cfg = load_search_config(str(REPO / "configs" / "smoke.yaml"))
    env, named = search.trial_env(cfg)
    assert named == env[library_env.COMPILE_CACHE_VAR] == str(tmp_path / "user" / "compile")
    assert f"compile cache: {tmp_path / 'user' / 'compile'} (empty" in capsys.readouterr().err

    shared = load_search_config(
        str(REPO / "configs" / "smoke.yaml"), [f"search.cache_dir={tmp_path / 'nfs'}"]
    )
    assert search.trial_env(shared)[1] == str(tmp_path / "nfs")
    assert search.trial_env(shared, str(tmp_path / "flag"))[1] == str(tmp_path / "flag")  # --cache-dir wins

    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"^--cache-dir: .*file/sub cannot be made"):
        search.trial_env(cfg, str(tmp_path / "file" / "sub"))
    assert search.build_parser().parse_args(["--config", "c", "--cache-dir", "d"]).cache_dir == "d"

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "i"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "t"))
    assert search.trial_env(cfg)[1] is None  # best.yaml names no cache: the user's are theirs to name
    assert "the dirs you exported" in capsys.readouterr().err


def fill(root: Path, key: CacheKey, size: int) -> None:
    compile_cache.record_key(root, key)
    compile_cache.write_files(root / key.name / "inductor", {"fxgraph/a/entry": b"x" * size})


def test_the_cli_lists_each_key_and_clears_one_or_all(tmp_path, capsys):
    root = tmp_path / "cache"
    h100 = CacheKey("NVIDIA H100 80GB HBM3 sm_90", {"torch": "2.11.0+cu130", "triton": "3.6.0"})
    h200 = CacheKey("NVIDIA H200 sm_90", {"torch": "2.11.0+cu130", "triton": "3.6.0"})
    fill(root, h100, 3 << 20)
    fill(root, h200, 1 << 20)
    (root / "notes").mkdir()  # not a key's: never listed, never cleared

    assert caches.main(["--cache-dir", str(root)]) == Exit.OK
    out = capsys.readouterr().out
    assert f"{root}: 4.0 MB in 2 keys" in out
    assert out.index(h100.name) < out.index(h200.name)  # largest first
    assert (
        f"{h100.name}: 3.0 MB, 2 files" in out
    )  # the entry and key.json and "NVIDIA H100 80GB HBM3 sm_90; python" in out
    assert "torch 2.11.0+cu130, triton 3.6.0" in out and "notes" not in out

    assert caches.main(["--cache-dir", str(root), "--clear", "nope"]) == Exit.BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no key 'nope'" in err and h200.name in err

    assert caches.main(["--cache-dir", str(root), "--clear", h200.name]) == Exit.OK
    assert sorted(p.name for p in root.iterdir()) == sorted([h100.name, "notes"])
    assert caches.main(["--cache-dir", str(root), "--clear"]) == Exit.OK
    assert [p.name for p in root.iterdir()] == ["notes"]
    assert "cleared 1 key from" in capsys.readouterr().out
    assert caches.main(["--cache-dir", str(root)]) == Exit.OK
    assert "no compile caches yet" in capsys.readouterr().out


def test_a_searchs_trials_key_the_root_they_are_given_and_a_later_search_hits_it(
    tmp_path, no_cache_env, monkeypatch
):
    """Real Ray, real Tune: the trials get the root in their runtime env (as `search.trial_env` makes it),
    key it in their own process, and a later search's trial, with another OUT, finds the graphs."""
    import ray
    from toy_workload import TOY

    from trainables.spec import TrialSpec
    from tuner.runs.request import Placement
    from tuner.runs.tune import run_cases

    monkeypatch.chdir(TESTS)  # workers get the driver's cwd on sys.path: toy_workload imports
    root = tmp_path / "cache"
    env, own = library_env.trial_env(root, 1)
    assert own
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": env})  # fmt: skip
    try:
        case = TrialSpec.of({**TOY, "compile": "default", "tokens": 8 * 16 * 12})
        one = Placement({"cpu": 1}, reuse_actors=False)  # a fresh process each, as two searches have
        first = run_cases("first", tmp_path / "out-a", [case], one)
        second = run_cases("second", tmp_path / "out-b", [case], one)
    finally:
        ray.shutdown()
    assert (first[0].status, second[0].status) == ("ok", "ok"), (first[0].error, second[0].error)
    assert (first[0].compile_cache_use, second[0].compile_cache_use) == ("miss", "hit")
    (key,) = [p for p in root.iterdir()]
    assert json.loads((key / KEY_FILE).read_text()) == CacheKey.here("auto").as_json()
    assert [p for p in manifest(key / "inductor") if p.startswith("fxgraph/")]
