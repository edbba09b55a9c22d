"""bench/horizon_agreement.py on the CPU with the smoke model and a short planned run: the baseline at two
seeds and two configs trained to the end, each evaluated at every horizon's prefix, judged at both."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "horizon_agreement.py"
TINY = [f"--set={kv}" for kv in ("tokens=4096", "eval_tokens=1024", "log_interval=2", "cpu_threads=1")]


def bench(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(BENCH), "--config", str(ROOT / "configs" / "smoke.yaml"), *TINY, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_each_config_is_judged_at_the_prefix_and_at_the_full_run(tmp_path):
    configs = tmp_path / "configs.yaml"
    configs.write_text(yaml.safe_dump([{"batch_size": 8}]))
    out = tmp_path / "agreement.json"
    done = bench("--configs", str(configs), "--horizons", "50%,25%", "--jobs", "3", "--out", str(out),
                 "--work", str(tmp_path / "runs"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["planned_tokens"] == 4096
    # batches 8 and 16 of 64 tokens: prefixes of whole steps of the larger, 1024 tokens
    assert [h["tokens"] for h in record["horizons"]] == [2048, 1024]
    assert record["tokens"] == 2048 and record["fraction"] == 0.5  # the first horizon is the one cited
    for horizon in record["horizons"]:
        loss_limit = horizon["loss_limit"]
        seeds = loss_limit["seed_losses"]
        assert len(seeds) == 2 and loss_limit["noise"] == pytest.approx(abs(seeds[0] - seeds[1]))
        assert loss_limit["limit"] == pytest.approx(sum(seeds) / 2 + 0.05)  # the spread is shown, not added
        assert len(horizon["verdicts"]) == 1 and horizon["total"] == 1
        for v in horizon["verdicts"]:
            assert v["status"] == "ok" and v["short_loss"] is not None and v["full_loss"] is not None
            assert v["short_pass"] == (v["short_loss"] <= loss_limit["limit"])
            assert v["full_pass"] == (v["full_loss"] <= record["full_loss_limit"]["limit"])
        assert horizon["agreed"] == sum(v["short_pass"] == v["full_pass"] for v in horizon["verdicts"])
    # the prefix losses are earlier points of the same runs: a run at 25% is behind itself at 50%
    early, later = (h["verdicts"][0]["short_loss"] for h in reversed(record["horizons"]))
    assert early > later
    assert "agreed" in done.stdout and str(out) in done.stdout


@pytest.mark.parametrize(("args", "needle"), [(["--horizons", "100%"], "reaches the planned run"),
                                              (["--horizons", "ten"], "ten"),
                                              (["--configs", "/no/such.yaml"], "/no/such.yaml")])  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(args, needle, capsys):
    """The script's `main` in this process (a subprocess's imports were most of this test; the run above
    holds the script as a user runs it): the same arguments, exit code and stderr."""
    spec = importlib.util.spec_from_file_location("horizon_agreement", BENCH)
    script = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # as its dataclasses need
    spec.loader.exec_module(script)
    code = script.main(["--config", str(ROOT / "configs" / "smoke.yaml"), *TINY, *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
