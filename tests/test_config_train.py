"""A search config's train section is a TrainConfig that remembers which keys were set: the search's own
(data, data_sha256, workload_path) count as set, and what state.json keeps, --resume compares and the
fingerprint hashes are those keys, never every default."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainables.config import ConfigError, read_yaml
from trainables.workloads.workload import WorkloadInfo
from tuner import search
from tuner.config import SearchConfig
from tuner.session.out_lock import OutLock
from tuner.space.domains import fit_to_workload
from tuner.state import out_claim
from tuner.state.search_state import State

SMOKE = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")
TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(6000))


def claim(out: Path, *sets: str, resume: bool = False) -> SearchConfig:
    """The config a search at OUT goes on with, as the CLI reads and claims it (the lock let go after)."""
    argv = ["--config", SMOKE, "--out", str(out), "--data", "corpus.txt"]
    argv += [a for s in sets for a in ("--set", s)] + (["--resume"] if resume else [])
    args = search.build_parser().parse_args(argv)
    cfg, corpus, _ = search.read_config(args, out)
    out.mkdir(exist_ok=True)
    lock = OutLock(out)
    try:
        return out_claim.claim_out(args, out, lock, "python -m tuner.search", cfg, corpus)
    finally:
        lock.release()


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # --data corpus.txt is read against the working directory
    (tmp_path / "corpus.txt").write_text(TEXT)
    return tmp_path


def test_the_search_sets_its_corpus_on_train_and_keeps_it_with_the_users_keys(here):
    cfg = claim(here / "out", "train.batch_size=32")
    assert cfg.train.batch_size == 32 and cfg.train.data == str(here / "corpus.txt")
    assert cfg.train.data_sha256 is not None and len(cfg.train.data_sha256) == 64
    written = cfg.model_dump()["train"]
    assert set(written) == set(read_yaml(SMOKE)["train"]) | {"data", "data_sha256"}
    assert written["batch_size"] == 32 and "grad_accum" not in written  # a default no one set


def test_resume_goes_on_with_the_same_config_and_refuses_another(here):
    out = here / "out"
    first = claim(out)
    state = State(out)  # what the search leaves in state.json
    state.data["config"] = first.model_dump()
    state.save()
    again = claim(out, resume=True)
    assert again.model_dump() == first.model_dump() and again.train.data_sha256 == first.train.data_sha256
    with pytest.raises(ConfigError, match="was started with other settings"):
        claim(out, "train.seed=7", resume=True)
    with pytest.raises(ConfigError, match="was started with other settings"):
        claim(out, "train.grad_accum=1", resume=True)  # its default, but set: not the search that started


def test_a_module_workloads_folder_is_set_on_train_unless_the_user_set_one():
    info = WorkloadInfo(
        spec="jobs.lm:make", description="a module workload", supports=frozenset(), code_root="/code"
    )
    fitted = fit_to_workload(SearchConfig(train={"batch_size": 4}), info)
    assert fitted.train.workload_path == "/code"
    assert fitted.model_dump()["train"] == {"batch_size": 4, "workload_path": "/code"}
    own = SearchConfig(train={"workload_path": "/mine"})
    assert fit_to_workload(own, info).train.workload_path == "/mine"
