"""End-to-end searches on CPU: real Ray (local processes), real Optuna with journal storage, the real loop.

Each test runs `python -m tuner.search` as a user would, as a subprocess, and checks what it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from ray._raylet import GcsClient

from tests.answer_checks import check_answer
from tests.k8s import checks
from tests.ray_procs import free_ports, stop_group
from tests.user_env import user_env
from trainables.config import load_config
from trainables.data import resolve_corpus
from tuner.decide.select import pick_winner, spread
from tuner.space.knobs import execution, knob_diff, loss_key
from tuner.state.records import Finalist

ROOT = Path(__file__).resolve().parents[1]
SHAKESPEARE = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
DATA = [str(SHAKESPEARE)] if SHAKESPEARE.exists() else []  # else the embedded default corpus
ENV = {**user_env(), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "TUNER_OFFLINE": "1"}

pytestmark = pytest.mark.slow


def search(out: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The search's CLI to its end; past `timeout` it and its Ray are killed and the test fails with what the
    search printed last and the phases it finished (a CI timeout showed only its first three lines)."""
    data = ["--data", DATA[0]] if DATA else []
    cmd = [sys.executable, "-m", "tuner.search", "--out", str(out), *data, *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        state = out / "state.json"
        phases = list(json.loads(state.read_text())["phases"]) if state.exists() else []
        tail = "\n".join(stderr.splitlines()[-40:])
        pytest.fail(f"the search ran past {timeout} s; phases finished: {phases}; its last lines:\n{tail}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


# A shorter planned run (16 steps at batch 16, a one-batch eval) for the loss checks of the tests whose
# assertions are about the screen, the phases' bookkeeping or where runs went, not about the loss itself:
# every phase still runs, each in seconds instead of a full smoke-sized training.
SHORT_LOSS_RUNS = ["--set", "train.tokens=16384", "--set", "train.eval_tokens=2048"]


def load_summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_smoke_search_writes_everything_and_picks_the_fastest_feasible(tmp_path, monkeypatch):
    out = tmp_path / "smoke"
    started = time.time()
    job = tmp_path / "train-best.yaml"
    proc = search(out, "--config", "configs/smoke.yaml", "--emit-rayjob", str(job))
    wall = time.time() - started
    assert proc.returncode in (0, 3, 4), proc.stderr[-3000:]  # 4: the machine was busy
    print(f"smoke search wall time: {wall:.0f} s")  # recorded in docs/benchmarks.md, not asserted
    s = load_summary(out)
    for name in ("summary.json", "report.md", "best.yaml", "optuna.journal", "state.json"):
        assert (out / name).exists(), name
    assert list((out / "ray").rglob("events.out.tfevents*")), "TensorBoard event files per trial"
    screen = [t for t in s["trials"] if t["phase"] == "screen"]
    assert len(screen) >= 8
    configs = [json.dumps(t["config"], sort_keys=True) for t in screen]
    assert len(configs) == len(set(configs)), "a config was trained twice in the screen"
    assert f"reports: {out / 'report.md'}" in proc.stderr
    manifests = checks.load(job.read_text())  # --emit-rayjob: the answer as a RayJob that KubeRay accepts
    assert {m["kind"] for m in manifests} == {"ConfigMap", "RayJob"}
    assert all(not checks.problems(m) for m in manifests)
    assert f"RayJob for best.yaml: {job}" in proc.stderr
    assert {t["status"] for t in s["trials"]} <= {"ok", "oom", "nan", "stopped", "error"}
    for t in s["trials"]:
        assert t["feasible"] in (True, False, None)
        if t["status"] in ("oom", "nan", "error"):
            assert t["feasible"] is False
    assert s["baseline"]["val_loss"] is not None and s["loss_limit"]["limit"] > s["baseline"]["val_loss"]
    if DATA:  # the smoke config's acceptance: its full budget reaches val loss 2.5 on tinyshakespeare
        assert s["baseline"]["val_loss"] <= 2.5, s["baseline"]
    # every trial was pinned to the corpus the driver resolved
    monkeypatch.setenv("TUNER_OFFLINE", ENV["TUNER_OFFLINE"])  # resolve as the search's driver did
    corpus = resolve_corpus(DATA[0] if DATA else None)
    assert {t["train"]["data_sha256"] for t in s["trials"]} == {corpus.sha256}
    report = (out / "report.md").read_text()
    # on a CPU the table leaves out VRAM (and the HTML its J/token): they mean nothing there
    assert (
        "Config | Batch | Workers | Precision | Compile | Kernels | Tok/s | Warm-up | Loss | vs baseline"
        in report
    )

    # The winner is what the selection rule picks from the exclusive re-measurements, and it is feasible.
    remeasure = [t for t in s["trials"] if t["phase"] == "remeasure"]
    by_id: dict[str, list[float]] = {}
    trust: dict[str, list[bool]] = {}  # a run flagged CPU-shared (another process busy) is not trusted
    for t in remeasure:  # a contended window counts only where all of a finalist's were contended
        contended = [bool(r["cpu_shared"]) for r in remeasure if r["finalist"] == t["finalist"]]
        if not t["cpu_shared"] or all(contended):
            by_id.setdefault(t["finalist"], []).append(t["tokens_per_s"])
        if t["telemetry_trusted"] is not None:
            trust.setdefault(t["finalist"], []).append(t["telemetry_trusted"])
    screen_by_id = {t["id"]: t for t in screen}
    finalists = [
        Finalist(
            id=fid,
            config=screen_by_id[fid]["config"] if fid != "baseline" else {},
            runs=runs,
            val_loss=None,
            feasible=True if fid == "baseline" else screen_by_id[fid]["feasible"],
            joules_per_token=None,
            telemetry_trusted=all(trust[fid]) if fid in trust else None,
        )
        for fid, runs in by_id.items()
    ]
    expected = pick_winner(finalists, s["baseline"]["config"]).winner
    check_answer(out, proc.returncode)  # on every exit: the answer it gives holds, and best.yaml trains it
    if s["best"] is not None:  # exit 0, or 3 where the baseline won a tie
        assert s["best"]["id"] == expected.id
        median, lo, hi = spread(expected.runs)
        assert s["best"]["tokens_per_s"] == median
        faster = [f for f in finalists if f.feasible and spread(f.runs)[1] > hi]
        assert not faster, f"a feasible finalist is faster beyond the spread: {faster}"
        if s["best"]["id"] != "baseline":
            assert s["best"]["val_loss"] <= s["loss_limit"]["limit"]
        best = load_config(out / "best.yaml")
        for knob, value in s["best"]["config"].items():
            assert getattr(best, knob) == value
        assert best.data_sha256 is None  # best.yaml trains on its user's corpus
    else:  # the baseline stays: nothing else passed (3), or the figures were not trusted (4)
        assert s["best"] is None
        assert "baseline" in proc.stderr
        assert expected is None or expected.id == "baseline" or proc.returncode == 4, expected
    # on a CPU, best.yaml's run keeps torch's threads (they are its compute), whatever the trials had
    assert load_config(out / "best.yaml").cpu_threads is None


def test_a_killed_search_whose_journal_and_ledger_were_cut_resumes_and_loses_nothing_finished(tmp_path):
    """SIGKILL of the search and its Ray mid-screen, then `truncate -s -60 OUT/optuna.journal` and `-200
    OUT/trials/screen.jsonl` (a kill mid-write): --resume drops the two partial records (one line each),
    keeps every row finished before the cut, skips the probe and finishes with every trial once; a resume
    of a finished search only re-reports.

    Its screen also starts from a real OOM (batch 4096 under a 400 MB cap) and a real NaN (lr 1e4, fp16):
    they are recorded oom and nan, infeasible with an error, and never picked (once a test of their own)."""
    out = tmp_path / "cut"
    trials = 5
    data = ["--data", DATA[0]] if DATA else []
    # the same settings for every run of OUT (--resume refuses others); one re-measure repeat is enough here
    settings = ["--config", "configs/smoke.yaml", *SHORT_LOSS_RUNS, "--set", "search.repeats=1"]
    settings += ["--trials", str(trials), *OOM_AND_NAN]
    cmd = [sys.executable, "-m", "tuner.search", *settings, "--out", str(out), *data]
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=log, stderr=log, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if "[screen] 2/" in (tmp_path / "first.log").read_text():
            break
        time.sleep(0.5)
    assert proc.poll() is None, "the search ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
    proc.wait()
    state = json.loads((out / "state.json").read_text())
    assert "probe" in state["phases"] and "screen" not in state["phases"]
    ledger, journal = out / "trials" / "screen.jsonl", out / "optuna.journal"
    kept = ledger.read_text().splitlines()[:-1]  # the rows before the one the cut reaches
    os.truncate(journal, journal.stat().st_size - 60)
    os.truncate(ledger, ledger.stat().st_size - 200)

    resumed = search(out, *settings, "--resume")
    assert resumed.returncode in (0, 3, 4), resumed.stderr[-3000:]
    assert "[probe] already done" in resumed.stderr
    assert f"{journal}: dropped its last record" in resumed.stderr
    assert f"{ledger}: dropped its last record" in resumed.stderr
    assert ledger.read_text().splitlines()[: len(kept)] == kept  # nothing finished before the cut was lost
    s = load_summary(out)
    screen = [t for t in s["trials"] if t["phase"] == "screen"]
    assert len(screen) == trials and len({t["ray_trial_id"] for t in screen}) == trials
    assert len([t for t in s["trials"] if t["phase"] == "baseline"]) == 1
    ids = [t["id"] for t in s["trials"]]
    assert len(ids) == len(set(ids))
    oom_and_nan_are_infeasible_and_never_chosen(s)
    check_answer(out, resumed.returncode)

    again = search(out, *settings, "--resume")  # a finished search just re-reports
    assert again.returncode == resumed.returncode
    check_answer(out, again.returncode)
    assert "estimated" not in again.stderr  # no estimate for phases it then skips (issue 56 item 6)
    assert load_summary(out)["trials"] == s["trials"]


# A screen that starts from a real OOM and a real NaN: the space holds batch 4096 (over a 400 MB cap: no
# probe bounds it) and lr 1e4 in fp16.
OOM_AND_NAN = [
    "--set", "train.memory_cap_mb=400",
    "--set", "search.space={batch_size: [16, 32, 4096], precision: [fp32, fp16], lr: [0.003, 10000.0]}",
    "--set", "search.start_points=[{batch_size: 4096}, {precision: fp16, lr: 10000.0}]",
    "--set", "search.probe_batch=false",
]  # fmt: skip


def oom_and_nan_are_infeasible_and_never_chosen(s: dict) -> None:
    screen = [t for t in s["trials"] if t["phase"] == "screen"]
    statuses = {t["status"] for t in screen}
    assert "oom" in statuses and "nan" in statuses, [(t["config"], t["status"]) for t in screen]
    for t in screen:
        if t["config"].get("batch_size") == 4096:
            assert t["status"] == "oom" and t["feasible"] is False
        if t["status"] in ("oom", "nan"):
            assert t["feasible"] is False and t["error"]
    if s["best"]:
        assert s["best"]["config"].get("batch_size") != 4096
        assert s["best"]["config"].get("lr") != 10000.0


# Every port the head opens, chosen free, so that it stays clear of other Ray instances on the machine.
HEAD_PORTS = (
    "port", "ray-client-server-port", "node-manager-port", "object-manager-port", "metrics-export-port",
    "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
)  # fmt: skip


@pytest.fixture
def fake_gpu_cluster(tmp_path):
    """A real local Ray cluster (`ray start --head --block`, in a process group of its own, so the test
    stops exactly what it started) that advertises 2 GPUs it does not have: the search takes every GPU
    code path (probe, GPU shares, one timing gate per GPU, loss runs packed across GPUs) while trials train
    on the CPU. 4 logical CPUs: two runs share each GPU (a whole GPU per run, as on 4 GPUs, is held by
    tests/test_loss_placement.py and tests/test_gate.py)."""
    gpus = 2
    ports = dict(zip(HEAD_PORTS, free_ports(len(HEAD_PORTS))))
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--num-cpus=4"]
    cmd += [f"--num-gpus={gpus}", "--node-ip-address=127.0.0.1", *(f"--{k}={v}" for k, v in ports.items())]
    cmd += ["--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"]
    log = tmp_path / "ray-head.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=ENV, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{ports['port']}"
    try:
        wait_for_head(proc, address, log)
        yield address, gpus
    finally:
        stop_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def wait_for_head(proc: subprocess.Popen, address: str, log: Path, timeout: float = 120) -> None:
    """Until the head's node is alive in its GCS (asked through Ray's GCS client: this head has no dashboard)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"the Ray head ended: {log.read_text()[-3000:]}"
        try:
            infos = GcsClient(address=address).get_all_node_info(timeout=5)
        except Exception:  # noqa: BLE001 - the head is not up yet
            infos = {}
        if any(i.state == 0 for i in infos.values()):  # 0: ALIVE
            return
        time.sleep(1)
    raise AssertionError(f"the Ray head did not start in {timeout:.0f} s: {log.read_text()[-3000:]}")


def test_the_gpu_path_runs_end_to_end_on_a_cluster_with_fake_gpus(tmp_path, fake_gpu_cluster):
    address, gpus = fake_gpu_cluster
    out = tmp_path / "fake-gpu"
    proc = search(
        out,
        "--config",
        "configs/smoke.yaml",
        "--address",
        address,
        "--trials",
        "8",
        "--set",
        "search.start_points=[{loader: device}]",  # the baseline's loss knobs: a twin for its loss run
        "--set",
        "search.early_stop_ratio=0",  # on 2 busy cores the early stopper could stop the twin
        "--set",
        "search.time_budget=8m",  # GPU time: 4 minutes of wall time on 2 GPUs, 2 on 4
        "--set",
        "search.loss_check_top=3",  # with the baseline's, up to a loss run for each of 4 GPUs
        "--set",
        "search.repeats=2",  # re-measure runs on both GPUs: 2 each and 2 of the baseline are plenty
        *SHORT_LOSS_RUNS,
        timeout=900,
    )
    assert proc.returncode in (0, 3, 4), proc.stderr[-3000:]  # 4: the machine was busy
    check_answer(out, proc.returncode)
    wall = 480 // gpus
    assert f"[screen] time budget 8m of GPU time over {gpus} GPUs: {wall} s of wall time" in proc.stderr
    s = load_summary(out)
    state = json.loads((out / "state.json").read_text())
    assert s["hardware"]["gpus"] == gpus and not s["hardware"]["cuda"]
    assert state["phases"]["probe"], "the batch probe ran on the GPU path"
    assert "[probe] largest batch per precision" in proc.stderr
    timed = [t for t in s["trials"] if t["phase"] in ("screen", "remeasure") and t["status"] == "ok"]
    assert timed and all(t["gate_wait_s"] is not None for t in timed), "every speed run went through the gate"
    for gpu in range(gpus):  # one timed window per GPU at a time; nothing assumes GPU 0
        windows = sorted((t["window_t0"], t["window_t1"]) for t in timed if t["gpu"] == gpu)
        for (_, end), (begin, _) in zip(windows, windows[1:]):
            assert begin >= end - 1e-3, f"two timed windows on GPU {gpu} overlapped: {windows}"

    def shared(gpu: int) -> bool:  # two of the screen's runs on this GPU at once (their windows apart)
        spans = sorted(
            (t["window_t1"] - t["wall_s"], t["window_t1"])
            for t in timed
            if t["phase"] == "screen" and t["gpu"] == gpu
        )
        return any(b < a_end for (_, a_end), (b, _) in zip(spans, spans[1:]))

    assert any(shared(gpu) for gpu in range(gpus)), "screen runs shared a GPU"
    base = next(t for t in s["trials"] if t["phase"] == "baseline")
    twin = next(t for t in s["trials"] if t["id"] == base["twin_of"])
    # the baseline's loss run trained beside the screen, with the execution of the start point that shares
    # its loss knobs, parking for the screen's windows on its GPU
    assert twin["config"]["loader"] == "device" and base["execution"] == execution(twin["train"])
    assert "[baseline] its loss run trains beside the screen (loader=device)" in proc.stderr
    screen_end = max(t["window_t1"] for t in timed if t["phase"] == "screen")
    assert base["window_t0"] < screen_end, "it trained while the screen ran"
    assert base["gate_wait_s"] is not None
    assert loss_key(twin["config"], base["train"]) == loss_key({}, base["train"])
    assert s["baseline"]["loss_execution"] == base["execution"]
    loss_runs = [t for t in s["trials"] if t["phase"].startswith("loss_check") or t["phase"] == "baseline"]
    remeasured = [t for t in s["trials"] if t["phase"] == "remeasure"]
    for phase, rows in (("speed", timed), ("re-measure", remeasured)):
        assert {t["gpu"] for t in rows} == set(range(gpus)), f"not every GPU got {phase} runs"
    # the candidates' loss runs trained ahead of the rounds, beside the screen, as the screen found them
    ahead = [t for t in loss_runs if t["phase"] == "loss_check_ahead"]
    started = proc.stderr.find("loss run trains ahead, beside the screen")
    said = "\n".join(line for line in proc.stderr.splitlines() if line.startswith(("[loss_check]", "notice")))
    screened = [t for t in s["trials"] if t["phase"] == "screen" and t["status"] == "ok"]
    own = [t["tokens_per_s"] for t in screened if not knob_diff(t["config"], s["baseline"]["config"])]
    # on busy cores the baseline may screen fastest: then nothing may train ahead
    if own and not any(t["tokens_per_s"] > max(own) for t in screened):
        assert started < 0 and not ahead, "no loss run for a config screened slower than the baseline"
    else:
        assert 0 <= started < proc.stderr.find("[search] screen done"), (
            f"none started while the screen ran:\n{said}"
        )
        # each stands for its candidates' loss, or, outrun by configs the screen found later, was stopped
        assert ahead or "loss run(s) ahead no round needed: stopped" in proc.stderr, said
    assert all(t["gate_wait_s"] is not None and t["screen_id"] for t in ahead)
    checked_by = {t["loss_checked_by"] for t in s["trials"] if t["phase"] == "screen"}
    assert {t["id"] for t in ahead} <= checked_by, "each run ahead stands for its candidates' loss"
    for round_no in {
        t["phase"] for t in loss_runs if t["phase"] not in ("baseline", "loss_check_ahead")
    }:  # each round spreads its runs
        runs = [t for t in loss_runs if t["phase"] == round_no]
        per_gpu = [sum(1 for t in runs if t["gpu"] == g) for g in range(gpus)]
        assert max(per_gpu) - min(per_gpu) <= 1, f"{round_no}: loss runs not spread evenly: {per_gpu}"
    assert any("telemetry unavailable" in n for n in s["notices"])  # no NVML behind the fake GPU
    # best.yaml's run spins no more threads than the runs that timed its config (Ray: one per trial CPU)
    best_id = (s["best"] or {}).get("id", "baseline")
    timed_threads = {t["cpu_threads"] for t in remeasured if best_id in (t["id"], t["finalist"])}
    assert timed_threads == {1} and load_config(out / "best.yaml").cpu_threads == 1


def test_resume_refuses_other_settings_rebuilds_a_damaged_state_and_a_screen_that_finished_nothing_exits_6(
    tmp_path,
):
    """`--resume` with other settings is exit 2; a state.json cut short is kept as state.json.damaged, rebuilt,
    and the search goes on. That search (once a test of its own) has a 1 s budget: it ends before any screen
    run finishes, exits 6 and says so (issue 33: it blamed the loss check, exit 3)."""
    out = tmp_path / "out"
    out.mkdir()
    state = {"phases": {}, "config": json.loads(json.dumps({"train": {"seq_len": 64}}))}
    (out / "state.json").write_text(json.dumps(state))
    proc = search(out, "--config", "configs/smoke.yaml", "--resume", timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "was started with other settings" in lines[-1], proc.stderr
    (out / "state.json").write_text('{"phases": {"hardw')  # cut short by a crash
    proc = search(
        out, "--config", "configs/smoke.yaml", "--time-budget", "1", "--set", "search.repeats=2",
        "--set", "search.baseline_repeats=2", *SHORT_LOSS_RUNS, "--resume",
    )  # fmt: skip
    assert "was damaged" in proc.stderr and "rebuilt" in proc.stderr, proc.stderr[-2000:]
    assert (out / "state.json.damaged").read_text() == '{"phases": {"hardw'  # nothing lost
    assert "[probe] already done" not in proc.stderr  # rebuilt: the search starts over
    assert proc.returncode == 6, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert any(line.startswith("[screen] the screen finished 0 ") for line in lines), proc.stderr[-3000:]
    # 1 s ends it while Ray starts the first trials' workers (none started) or they compile
    assert "its time budget (1 s) ended while" in lines[-2] and "raise --time-budget" in lines[-2]
    assert "no config passed the loss check" not in proc.stderr
    assert "notice: the screen's time budget ended it after 0 of " in proc.stderr  # said, not only implied
    assert lines[-1] == f"run it: python -m trainables.train --config {(out / 'best.yaml').resolve()}"
    assert load_config(str(out / "best.yaml")).batch_size == load_config("configs/smoke.yaml").batch_size
    assert load_summary(out)["nothing_screened"].startswith("the screen finished 0 ")
    check_answer(out, proc.returncode)
