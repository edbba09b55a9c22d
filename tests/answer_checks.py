"""What a finished search's OUT must hold of its answer on every exit, checked from summary.json and best.yaml:
for the end-to-end searches (tests/test_search.py, ...), which checked the winner only on exit 0, and the
searches run from recorded rows (tests/recorded_search.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

from trainables.common.exit_codes import Exit
from trainables.config import load_config
from tuner.space.knobs import RUN_ONLY_FIELDS
from tuner.state.records import BASELINE_ID, Summary, could_win


def check_answer(out: Path, code: int) -> Summary:
    """What OUT's answer holds on every exit: exit 0 crowns a feasible finalist other than the baseline whose
    trusted re-measured median is no slower beyond the spreads than another feasible one's (unless it
    finishes the planned run first); 3 has no feasible finalist but the baseline, or crowns the baseline by
    that same rule (a tie it won); 4 had one, on untrusted figures; 6 screened nothing; on 3, 4 and 6 the
    baseline is the answer; and best.yaml trains exactly the answer."""
    s = Summary.model_validate_json((out / "summary.json").read_text())
    finalists = {f.id: f for f in s.finalists}
    crowned = code == Exit.OK or (code == Exit.BASELINE_STAYS and s.best is not None)
    if code == Exit.OK:
        assert s.best is not None and s.best.id != BASELINE_ID, s.best
    if code == Exit.BASELINE_STAYS and s.best is not None:
        assert s.best.id == BASELINE_ID, s.best
    if crowned:
        assert s.best is not None and not s.untrusted and s.nothing_screened is None, s.best
        answer = finalists[s.best.id]
        assert answer.feasible is True and answer.speed_trusted, answer
        assert s.best.tokens_per_s == statistics.median(answer.runs)
        assert s.loss_limit is not None and s.best.val_loss is not None
        assert s.best.val_loss <= s.loss_limit.limit, (s.best.val_loss, s.loss_limit)
        for row in (t for t in s.trials if t.id == s.best.id):
            assert row.feasible is True, row
        timed = [f for f in s.finalists if f.feasible is True and f.runs]
        if s.selection.finishes_later is None:  # none faster beyond both spreads
            assert not [f.id for f in timed if min(f.runs) > max(answer.runs)], timed
        else:  # faster ones, but it trains the planned run first, compile + warm-up included
            fastest = min(f.time_to_train_s for f in timed if f.time_to_train_s is not None)
            assert answer.time_to_train_s == fastest, timed
    else:
        assert code in (Exit.BASELINE_STAYS, Exit.UNTRUSTED, Exit.NOTHING_SCREENED), code
        assert s.best is None, s.best
    if code == Exit.BASELINE_STAYS and s.best is None:
        assert not could_win(s.finalists), s.finalists
    if code == Exit.UNTRUSTED:
        assert s.untrusted and s.refused
        said = [finalists[BASELINE_ID], *could_win(s.finalists)] if BASELINE_ID in finalists else s.finalists
        assert not all(f.speed_trusted for f in said), said
    if code == Exit.NOTHING_SCREENED:
        assert s.nothing_screened
    best = load_config(out / "best.yaml")
    chosen = s.best.config if s.best else {}
    knobs = {k for t in s.trials for k in t.config if k not in RUN_ONLY_FIELDS}
    for knob in knobs:
        assert getattr(best, knob) == chosen.get(knob, s.baseline.config[knob]), knob
    return s
