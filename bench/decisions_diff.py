"""Did two searches decide the same? (issue 35: "behaviour unchanged", shown on the smoke search)

    python bench/decisions_diff.py OUT_BEFORE OUT_AFTER

Reads each OUT (summary.json, optuna.journal, state.json) and prints, side by side, the decisions of the two searches,
each marked `same`, `DIFF` or `speed`:
- the screen's proposals in Optuna's trial order. TPE's seeded sampler draws a fixed sequence, and TPE reads
  the measured tok/s only through their order (it splits the finished trials into the best and the rest), so
  a proposal is speed-independent when both searches had seen the same trials finished, with the same
  configs and the same order of their tok/s; then a different config is a DIFF. Where the orders differed
  (a busy machine times the same config differently), what follows is marked `speed`;
- the searcher replayed: a fresh TPE with the screen's seed, asked and told in each search's own order with
  its own results, must propose every config that search proposed (else a DIFF): the rule that turned
  results into proposals is the same in both, whatever the speeds were. A study the loss-aware TPE drew
  (tuner/space/sampler.py, which keeps its seed, startup trials and start points in the study) is replayed
  by its own rule: each proposal drawn again from what it was drawn from (the trials then, the running
  ones, the loss constraints known then);
- the loss runs (the baseline's and the contenders'): val loss and verdict per trained config. A config
  trained by both must reach the same val loss (CPU training on a fixed seed and thread count is bit for
  bit; the loop records it to 5 decimals) and verdict; its final train loss is printed, and judged `speed`
  where it differs: it is the mean since the last progress line, and a slow run prints one every
  `progress_s` of wall time as well as every `log_interval` steps. Which contenders were trained follows
  the screen's speeds (`speed`);
- the loss limit (the baseline's loss, the tolerance, the limit);
- the answer and the speeds, printed only: they depend on the measured speed.
Exit 0: every speed-independent decision agrees; 1: one differs (a DIFF line); 2: an OUT that is not a
finished search's (one line says which file).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere

from tuner.space.sampler import DRAWN, REFUSED, reopened  # noqa: E402 - after the path insert
from tuner.space.sampler import replayed as replayed_draws  # noqa: E402
from tuner.state.older_summaries import loss_limit_in  # noqa: E402

STUDY = "screen"  # tuner/phases/screen.py's study name
optuna.logging.set_verbosity(optuna.logging.WARNING)  # the replays' studies need no announcing
TPE_READS = (TrialState.COMPLETE, TrialState.PRUNED)  # the finished trials TPE samples from
SAME, DIFF, SPEED = "same", "DIFF", "speed"


class BadOut(Exception):
    """An OUT that is not a finished search's: one line for the user."""


@dataclass(frozen=True)
class Proposal:
    """One config the screen's searcher proposed, and what it had seen when it proposed it."""

    number: int
    config: dict[str, Any]
    state: str
    tokens_per_s: float | None
    seen: tuple  # the finished trials TPE read: (number, config, state) each, and the order of their tok/s

    @property
    def refused(self) -> bool:
        """Refused before it ran (it cannot fit, or its loss cannot pass by the loss runs then)."""
        return self.state == "REFUSED"

    def line(self) -> str:
        speed = f"{self.tokens_per_s:,.0f} tok/s" if self.tokens_per_s is not None else "-"
        return f"{_knobs(self.config)} [{self.state.lower()}, {speed}]"


@dataclass(frozen=True)
class LossRun:
    """A run trained to the full token budget: the knobs it trained with, its val loss and verdict."""

    key: str
    phase: str
    status: str
    val_loss: float | None
    train_loss: float | None
    feasible: bool | None

    def line(self) -> str:
        verdict = {True: "pass", False: "fail", None: "-"}[self.feasible]
        return f"val {self.val_loss!r} {verdict}, train {self.train_loss!r} ({self.phase}, {self.status})"

    def decided(self) -> tuple:
        return self.status, self.val_loss, self.feasible


@dataclass(frozen=True)
class Search:
    out: Path
    proposals: list[Proposal]
    replayed: list[bool]  # per proposal: the seeded TPE, fed this search's own results, proposed it too
    sampler: str
    loss_runs: dict[str, LossRun]
    loss_limit: dict[str, Any]
    summary: dict[str, Any]


def read_search(out: Path) -> Search:
    summary_path = out / "summary.json"
    if not summary_path.is_file():
        raise BadOut(f"{summary_path}: no such file (not a finished search's OUT)")
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as e:
        raise BadOut(f"{summary_path}: not JSON ({e})") from None
    study = screen_study(out / "optuna.journal")
    trials = study.get_trials(deepcopy=False)
    seed, startup = screen_sampler(out / "state.json")
    loss_limit = loss_limit_in(summary) or {}  # an OUT from before the rename has `loss_gate`
    proposals = [_proposal(t, trials) for t in trials]
    own = reopened(study)  # the loss-aware TPE the study keeps (tuner/space/sampler.py), else Tune's
    if own is not None:
        sampler = f"loss-aware TPE (seed {own.seed}, {own.startup_trials} startup trials)"
        replayed = replayed_draws(own)
    else:
        sampler, replayed = f"TPE (seed {seed}, {startup} startup trials)", replay(trials, seed, startup)
    return Search(out, proposals, replayed, sampler, loss_runs(summary), loss_limit, summary)


def screen_sampler(state_path: Path) -> tuple[int, int]:
    """The screen's TPE seed and startup trials, as tuner/phases/screen.py builds its sampler."""
    try:
        search = json.loads(state_path.read_text())["config"]["search"]
        return int(search["seed"]), max(2, min(8, int(search["trials"]) // 3))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BadOut(f"{state_path}: no search.seed and search.trials in its config ({e!r})") from None


def replay(trials: list[FrozenTrial], seed: int, startup: int) -> list[bool]:
    """A fresh seeded TPE asked and told in the order the search asked and told its own (Ray Tune's
    OptunaSearch asks with the space's distributions and tells each trial's end): whether each proposal is
    the one the search made. It is, trial for trial, when the searcher's rule and seed are unchanged and
    only what it was told differs."""
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)
    )
    asks = [(t.datetime_start, 0, t.number) for t in trials]
    tells = [(t.datetime_complete, 1, t.number) for t in trials if t.datetime_complete]
    asked, same = {}, []
    for _, tell, number in sorted(asks + tells):
        trial = trials[number]
        if not tell:
            if (
                "fixed_params" in trial.system_attrs
            ):  # a start point, enqueued (OptunaSearch's points_to_evaluate)
                study.enqueue_trial(trial.system_attrs["fixed_params"])
            asked[number] = study.ask(fixed_distributions=trial.distributions)
            same.append(asked[number].params == trial.params)
            continue
        for step, value in sorted(trial.intermediate_values.items()):
            asked[number].report(value, step)
        value = trial.value if trial.state == TrialState.COMPLETE else None
        study.tell(asked[number], value, state=trial.state)
    return same


def screen_study(journal: Path) -> optuna.Study:
    """The screen's study, in memory, read from a copy (opening a journal may write beside it)."""
    trials = study_trials(journal)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / journal.name
        shutil.copyfile(journal, copy)
        kept = optuna.load_study(study_name=STUDY, storage=JournalStorage(JournalFileBackend(str(copy))))
        attrs = dict(kept.user_attrs)
    study = optuna.create_study(direction="maximize")
    study.add_trials(trials)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study


def study_trials(journal: Path) -> list[FrozenTrial]:
    """The study's trials in Optuna's order, read from a copy (opening a journal may write beside it)."""
    if not journal.is_file():
        raise BadOut(f"{journal}: no such file (the screen's study)")
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / journal.name
        shutil.copyfile(journal, copy)
        try:
            study = optuna.load_study(study_name=STUDY, storage=JournalStorage(JournalFileBackend(str(copy))))
        except (KeyError, ValueError) as e:
            raise BadOut(f"{journal}: no '{STUDY}' study in it ({e})") from None
        return study.get_trials(deepcopy=False)


def _proposal(trial: FrozenTrial, trials: list[FrozenTrial]) -> Proposal:
    proposed = trial.datetime_start
    read = [
        t
        for t in trials
        if t.number < trial.number
        and t.state in TPE_READS
        and t.datetime_complete
        and t.datetime_complete <= proposed
    ]
    values = sorted({t.value for t in read if t.value is not None})
    order = tuple(values.index(t.value) if t.value is not None else None for t in read)
    # a loss-aware draw's loss constraints (those it drew under; a refused config's own) are what it was told
    told = sorted(trial.user_attrs.get(DRAWN, {}).get("constraints", {}).items()) + sorted(
        trial.constraints.items()
    )
    seen = (tuple((t.number, _knobs(t.params), t.state.name) for t in read), order, tuple(told))
    state = "REFUSED" if REFUSED in trial.user_attrs else trial.state.name
    return Proposal(trial.number, dict(trial.params), state, trial.value, seen)


def loss_runs(summary: dict[str, Any]) -> dict[str, LossRun]:
    """The full-budget loss runs by the knobs they trained (a config's own and the execution it borrowed)."""
    runs = {}
    for row in summary.get("trials", []):
        phase = row.get("phase", "")
        if phase == "baseline" or phase.startswith("loss_check"):
            key = _loss_key(row)
            losses = row.get("val_loss"), row.get("train_loss")
            runs[key] = LossRun(key, phase, row.get("status", "?"), *losses, row.get("feasible"))
    return runs


def _loss_key(row: dict[str, Any]) -> str:
    """What it trained: the baseline's or a contender's knobs, with the speed-only knobs it borrowed (which
    twin lends them follows the screen's speeds, and a fused optimizer need not round as the plain one)."""
    knobs = _knobs({**(row.get("config") or {}), **(row.get("execution") or {})})
    if row.get("id") == "baseline" or "baseline" in row.get("phase", ""):
        return f"baseline + {knobs}" if knobs else "baseline"
    return knobs


def _knobs(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={config[k]}" for k in sorted(config))


def compare_proposals(a: Search, b: Search) -> list[tuple[str, str]]:
    lines, agreed = [], True  # agreed: every earlier proposal was the same config
    for n in range(max(len(a.proposals), len(b.proposals))):
        pa = a.proposals[n] if n < len(a.proposals) else None
        pb = b.proposals[n] if n < len(b.proposals) else None
        text = f"#{n}: {pa.line() if pa else '(none)'}  |  {pb.line() if pb else '(none)'}"
        determined = agreed and pa is not None and pb is not None and pa.seen == pb.seen
        if pa is not None and pb is not None and (pa.config, pa.refused) == (pb.config, pb.refused):
            mark = SAME
        else:
            mark = DIFF if determined else SPEED
            agreed = False
        lines.append((mark, text if determined else f"{text}  (TPE had seen other results or loss verdicts)"))
    return lines


def compare_replays(a: Search, b: Search) -> list[tuple[str, str]]:
    lines = []
    for name, s in (("A", a), ("B", b)):
        text = f"{name}: {s.sampler} fed {name}'s own results proposes {sum(s.replayed)} of {len(s.replayed)}"
        missed = [str(n) for n, same in enumerate(s.replayed) if not same]
        lines.append((DIFF, f"{text}; not #{', #'.join(missed)}") if missed else (SAME, text))
    return lines


def compare_loss_runs(a: Search, b: Search) -> list[tuple[str, str]]:
    lines = []
    for key in sorted(set(a.loss_runs) | set(b.loss_runs), key=lambda k: (k != "baseline", k)):
        ra, rb = a.loss_runs.get(key), b.loss_runs.get(key)
        text = f"{key}: {ra.line() if ra else '(not trained)'}  |  {rb.line() if rb else '(not trained)'}"
        if ra is None or rb is None:
            lines.append((SPEED, text))  # which contenders were trained follows the screen's speeds
        elif ra.decided() != rb.decided():
            lines.append((DIFF, text))
        elif ra.train_loss != rb.train_loss:  # its last window ends at a progress line, which time can set
            lines.append((SPEED, f"{text}  (train loss: the window since the last progress line)"))
        else:
            lines.append((SAME, text))
    return lines


def compare_loss_limit(a: Search, b: Search) -> list[tuple[str, str]]:
    """The loss limit rests on the baseline's loss run: judged where both trained it with the same knobs."""
    keys = ("baseline_loss", "tolerance", "mode", "limit")
    ga, gb = ({k: limit.get(k) for k in keys} for limit in (a.loss_limit, b.loss_limit))
    base_a, base_b = ({k for k in s.loss_runs if k.startswith("baseline")} for s in (a, b))
    if ga == gb:
        return [(SAME, f"{ga}  |  {gb}")]
    if base_a != base_b:
        return [(SPEED, f"{ga}  |  {gb}  (the baseline trained with other borrowed knobs)")]
    return [(DIFF, f"{ga}  |  {gb}")]


def speed_dependent(a: Search, b: Search) -> list[tuple[str, str]]:
    """The answer and the figures it rests on: printed, never judged (a busy machine times differently)."""
    lines = []
    for name, pick in (
        ("answer", _answer),
        ("baseline tok/s", lambda s: _fmt((s.summary.get("baseline") or {}).get("tokens_per_s"))),
        ("screen rows", lambda s: str(sum(t.get("phase") == "screen" for t in s.summary.get("trials", [])))),
        (
            "contended runs",
            lambda s: str(sum(bool(t.get("cpu_shared")) for t in s.summary.get("trials", []))),
        ),
    ):
        va, vb = pick(a), pick(b)
        lines.append((SAME if va == vb else SPEED, f"{name}: {va}  |  {vb}"))
    return lines


def _answer(s: Search) -> str:
    best = s.summary.get("best")
    if s.summary.get("untrusted"):
        return "baseline (untrusted speeds, exit 4)"
    if not best:
        return "baseline"
    return f"{_knobs(best.get('config') or {}) or 'baseline'} at {_fmt(best.get('tokens_per_s'))} tok/s"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python bench/decisions_diff.py OUT_BEFORE OUT_AFTER", file=sys.stderr)
        return 2
    try:
        a, b = (read_search(Path(p)) for p in argv)
    except BadOut as e:
        print(f"decisions_diff: {e}", file=sys.stderr)
        return 2
    print(f"A: {a.out}\nB: {b.out}")
    judged = False
    for title, lines in (
        ("screen proposals (Optuna's order)", compare_proposals(a, b)),
        ("the searcher replayed on each search's own results", compare_replays(a, b)),
        ("loss runs (val loss, verdict, train loss)", compare_loss_runs(a, b)),
        ("loss limit", compare_loss_limit(a, b)),
        ("speed-dependent (not judged)", speed_dependent(a, b)),
    ):
        print(f"\n{title}:")
        for mark, text in lines:
            print(f"  {mark:5} {text}")
            judged = judged or mark == DIFF
    print("\nspeed-independent decisions: " + ("DIFFER" if judged else "the same"))
    return 1 if judged else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
