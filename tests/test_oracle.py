"""bench/oracle.py on the CPU for real: the one-layer smoke model at 8 steps, batch 16 (the baseline) and 64
(2 steps: a loss the limit fails), tf32 offered (this machine cannot run it), the recipe fused AdamW, and the
product of precision and fused_adamw at the passing point. Three runs of `python -m trainables.train` in all:
the sample's two configs are the baseline's and the batch-16 point's own runs. The rerun and bad-input tests
call the script's `main` in this process with a train function that counts or refuses runs."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.factories import SMALL_SMOKE_MODEL
from trainables.config import dump_config, load_config
from tuner.config import QualitySection

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "oracle.py"
SMOKE = str(ROOT / "configs" / "smoke.yaml")
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DATA = ["--data", str(SHAKESPEARE)] if SHAKESPEARE.exists() else []
TINY = [*SMALL_SMOKE_MODEL, "train.tokens=8192", "train.eval_tokens=2048", "train.cpu_threads=1"]
SPACE = ["search.space.batch_size=[16,64]", "search.space.lr_scaling=[none]",
         "search.space.precision=[fp32,tf32]", "search.recipe={fused_adamw: true}"]  # fmt: skip
ARGS = [*DATA, *(f"--set={kv}" for kv in TINY + SPACE), "--knobs", "precision,fused_adamw"]


def load_script():
    spec = importlib.util.spec_from_file_location("oracle", BENCH)
    script = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="module")
def script():
    return load_script()


@pytest.fixture(scope="module")
def sat(script, tmp_path_factory):
    """One real sitting: (OUT, its oracle.json, the config files it trained, in order)."""
    out, trained = tmp_path_factory.mktemp("oracle"), []

    def counted(config_file, label):
        trained.append(yaml.safe_load(Path(config_file).read_text()))
        return script.train_alone(config_file, label)

    assert script.main(["--config", SMOKE, "--out", str(out), *ARGS], train=counted) == 0
    return out, json.loads((out / "oracle.json").read_text()), trained


def runs_as(record, role):
    return [r for r in record["runs"] if role in r["roles"]]


def test_the_limit_is_the_projects_rule_on_the_baselines_loss(sat):
    _, record, trained = sat
    (baseline,) = runs_as(record, "baseline")
    assert trained[0]["batch_size"] == 16 and trained[0]["fused_adamw"] is False  # the train: section first
    expected = QualitySection(tolerance=0.05, tolerance_from="config").loss_limit(baseline["val_loss"])
    assert record["limit"] == expected.model_dump(mode="json")
    assert record["limit"]["limit"] == pytest.approx(baseline["val_loss"] + 0.05)


def test_the_config_and_the_workload_set_the_limits_mode(script, tmp_path):
    """--set quality.* reaches the rule as the search's --set does, and a workload's declared tolerance
    stands where the config sets none (the digits classifier: relative 0.10); no run needed to see it."""
    args = ["--config", SMOKE, "--out", str(tmp_path / "o"), *ARGS, "--set=quality.mode=relative"]
    sitting = script.prepare(script.build_parser().parse_args(args), train=None)
    assert sitting.quality.mode == "relative" and sitting.quality.loss_limit(2.0).limit == pytest.approx(2.1)
    digits = yaml.safe_load((ROOT / "workloads" / "digits" / "cpu.yaml").read_text())
    digits["train"]["workload"] = str(ROOT / "workloads" / "digits" / "job.py") + ":make_workload"
    del digits["quality"]
    (tmp_path / "digits.yaml").write_text(yaml.safe_dump(digits))
    args = ["--config", str(tmp_path / "digits.yaml"), "--out", str(tmp_path / "d")]
    quality = script.prepare(script.build_parser().parse_args(args), train=None).quality
    assert (quality.mode, quality.tolerance, quality.tolerance_from) == ("relative", 0.10, "workload")


def test_a_point_whose_loss_fails_is_dropped_and_its_configs_never_train(sat):
    _, record, trained = sat
    by_batch = {p["batch"]: p for p in record["points"]}
    assert by_batch[16]["passed"] and not by_batch[64]["passed"] and ">" in by_batch[64]["why"]
    failed = next(r for r in record["runs"] if r["key"] == by_batch[64]["run"])
    assert failed["val_loss"] > record["limit"]["limit"] and failed["passed"] is False
    # the point ran at the recipe as it runs here; nothing else at batch 64 trained
    assert record["sample"]["point_execution"] == {"fused_adamw": True}
    assert [c["fused_adamw"] for c in trained if c["batch_size"] == 64] == [True]
    assert all(r["knobs"].get("batch_size", 16) == 16 for r in runs_as(record, "sample"))


def test_the_sample_is_the_stated_product_each_config_trained_once(sat):
    _, record, trained = sat
    assert record["sample"]["values"] == {"precision": ["fp32"], "fused_adamw": [False, True]}
    assert len(trained) == 3 == len(record["runs"])  # baseline, two points; the sample's two reuse them
    assert sorted(r["knobs"].get("fused_adamw", False) for r in runs_as(record, "sample")) == [False, True]
    assert all(r["status"] == "ok" and r["wall_s"] > 0 for r in record["runs"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="tf32 runs where there is CUDA")
def test_values_this_machine_cannot_run_are_skipped_with_the_projects_reason(sat):
    _, record, trained = sat
    (skipped,) = [s for s in record["sample"]["skipped"] if "tf32" in s["what"]]
    assert "CUDA" in skipped["why"] and all(c["precision"] == "fp32" for c in trained)


def test_the_oracle_is_the_fastest_passing_run(sat):
    out, record, _ = sat
    fair = [r for r in record["runs"] if r["status"] == "ok" and r["passed"]]
    assert record["oracle"]["key"] == max(fair, key=lambda r: r["tokens_per_s"])["key"]
    assert record["card"] == "cpu" and record["workload"]["workload"] == "hybrid"
    assert record["oracle"]["key"] in (out / "oracle.md").read_text()


def test_the_oracle_passes_over_a_faster_run_that_fails_and_the_answers_own_run(script):
    from bench.oracle_record import OracleRun
    from bench.oracle_sitting import fastest_passing

    def run(key, tps, passed=True, status="ok", roles=("sample",)):
        return OracleRun(key=key, roles=list(roles), knobs={}, config_file="x", status=status, exit_code=0,
                         tokens_per_s=tps, val_loss=1.0, wall_s=1.0, passed=passed)  # fmt: skip

    runs = [run("slow", 1.0), run("fails", 9.0, passed=False), run("nan", 8.0, status="nan", passed=False),
            run("answer", 7.0, roles=("answer",)), run("fast", 2.0)]  # fmt: skip
    assert fastest_passing(runs).key == "fast"


def fake_run(calls, val_loss, tokens_per_s=1000.0):
    """A train function that records the config it was given and answers as a run that trained."""
    from bench.oracle_runs import RunOutput

    def train(config_file, label):
        calls.append(yaml.safe_load(Path(config_file).read_text()))
        result = {"status": "ok", "tokens_per_s": tokens_per_s, "val_loss": val_loss, "unit": "tokens"}
        return RunOutput(0, result, 0.1, "")

    return train


def replay(record, calls):
    """A train function that answers each config with its run in `record` (its file is named by its key)."""
    from bench.oracle_runs import RunOutput

    runs = {r["key"]: r for r in record["runs"]}

    def train(config_file, label):
        calls.append(Path(config_file).stem)
        run = runs[Path(config_file).stem]
        result = {k: run[k] for k in ("status", "tokens_per_s", "val_loss", "unit", "compile_s")}
        return RunOutput(0, result, run["wall_s"], "")

    return train


def test_a_rerun_trains_only_what_its_out_did_not_record(sat, script, tmp_path):
    """As if the sitting was killed during the batch-64 point's run, after a signal took the batch-16
    point's (a killed run is no result): the rerun trains those two, the rest it takes from oracle.json."""
    out, record, _ = sat
    again = tmp_path / "again"
    shutil.copytree(out, again)
    point16, point64 = (next(p["run"] for p in record["points"] if p["batch"] == b) for b in (16, 64))
    runs = [r for r in record["runs"] if r["key"] != point64]
    runs = [{**r, "exit_code": -15, "status": "error"} if r["key"] == point16 else r for r in runs]
    (again / "oracle.json").write_text(json.dumps({**record, "runs": runs}))
    calls = []
    assert script.main(["--config", SMOKE, "--out", str(again), *ARGS], train=replay(record, calls)) == 0
    assert calls == [point16, point64]
    resumed = json.loads((again / "oracle.json").read_text())
    assert [r["key"] for r in resumed["runs"]] == [r["key"] for r in record["runs"]]
    assert resumed["oracle"]["key"] == record["oracle"]["key"] and resumed["points"] == record["points"]
    calls.clear()  # everything recorded: nothing trains
    assert script.main(["--config", SMOKE, "--out", str(again), *ARGS], train=replay(record, calls)) == 0
    assert calls == []


def write_best(path, *knobs):
    """A best.yaml as the search writes one: the tiny smoke baseline with `knobs` (KEY=VALUE) set."""
    dump_config(load_config(SMOKE, [kv.removeprefix("train.") for kv in TINY] + list(knobs)), path)
    return path


def test_the_answer_is_trained_alone_and_held_against_the_oracle(sat, script, tmp_path):
    out, record, _ = sat
    again = tmp_path / "with-answer"
    shutil.copytree(out, again)
    best = write_best(tmp_path / "best.yaml", "fused_adamw=true", "loader=device")  # in no run of the sample
    calls, loss = [], record["limit"]["limit"] - 0.01
    args = ["--config", SMOKE, "--out", str(again), *ARGS, "--answer", str(best)]
    assert script.main(args, train=fake_run(calls, loss, tokens_per_s=500.0)) == 0
    assert [(c["fused_adamw"], c["loader"]) for c in calls] == [(True, "device")]  # best.yaml, the one run
    answer = json.loads((again / "oracle.json").read_text())["answer"]
    assert answer["passed"] is True and answer["run"]["roles"] == ["answer"]
    assert answer["answer_over_oracle"] == pytest.approx(500.0 / record["oracle"]["tokens_per_s"])


@pytest.mark.skipif(not DATA, reason="a best.yaml's corpus is pinned as the oracle's where --data names it")
def test_an_answer_that_is_the_oracles_config_is_its_run(sat, script, tmp_path):
    """The search's answer is often a config the sample trained (the baseline, where it kept it): that run,
    held against the oracle, is 1x it where it is the oracle, not the spread of two runs of one config."""
    out, record, _ = sat
    again = tmp_path / "answer-is-oracle"
    shutil.copytree(out, again)
    best = write_best(tmp_path / "best.yaml", *(f"{k}={v}" for k, v in record["oracle"]["knobs"].items()))
    calls = []
    args = ["--config", SMOKE, "--out", str(again), *ARGS, "--answer", str(best)]
    assert script.main(args, train=fake_run(calls, 9.0)) == 0
    answer = json.loads((again / "oracle.json").read_text())["answer"]
    assert (
        calls == [] and answer["run"]["key"] == record["oracle"]["key"] and "answer" in answer["run"]["roles"]
    )
    assert answer["answer_over_oracle"] == 1.0 and answer["passed"] is True


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--config", "/no/such.yaml"], "/no/such.yaml"),
        (["--config", SMOKE, "--knobs", "precision,warp_speed"], "warp_speed"),
        (["--config", SMOKE, "--knobs", "batch_size"], "point knob"),
        (["--config", SMOKE, "--answer", "/no/best.yaml"], "--answer"),
        (["--config", SMOKE, "--points", "batch_size=48"], "[48]"),
        (["--config", SMOKE, "--sample", "-1"], "--sample"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_run(script, tmp_path, capsys, args, needle):
    def refuse(config_file, label):
        raise AssertionError(f"trained {config_file} on bad input")

    code = script.main([*args, "--out", str(tmp_path / "out"), *DATA], train=refuse)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_damaged_record_is_refused_not_overwritten(script, tmp_path, capsys):
    (tmp_path / "oracle.json").write_text("{not json")
    code = script.main(["--config", SMOKE, "--out", str(tmp_path), *ARGS], train=None)
    err = capsys.readouterr().err
    assert code == 2 and "not an oracle record" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "oracle.json").read_text() == "{not json"


def test_points_are_read_as_the_spaces_values(script):
    assert script.parse_points(["lr=3e-4,6.0e-4", "lr_scaling=none,sqrt", "batch_size=64"]) == {
        "lr": [3e-4, 6e-4],
        "lr_scaling": ["none", "sqrt"],
        "batch_size": [64],
    }


def test_a_long_run_says_it_is_running(script, monkeypatch, capsys):
    from bench import oracle_runs

    monkeypatch.setattr(oracle_runs, "HEARTBEAT_S", 0.2)
    started = time.monotonic()
    oracle_runs._wait(subprocess.Popen(["sleep", "0.7"]), "sample abc", started)
    assert capsys.readouterr().err.count("sample abc: running for") >= 2
