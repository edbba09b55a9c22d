"""How the reports mark a speed figure they do not trust, and what the marks and the answer's first words say
of it: contended (its timed windows were shared with other processes) or unjudged (they recorded nothing of
who else used the machine)."""

from __future__ import annotations

from tuner.report.rows import Trust

CONTENDED = " (contended)"  # after a speed taken while other processes used the CPUs or the GPU
UNJUDGED = " (unjudged)"  # after a speed whose windows recorded nothing of who else used the machine
MARKS: dict[Trust, str] = {"trusted": "", "contended": CONTENDED, "unjudged": UNJUDGED}
CONTENDED_NOTE = (
    "(contended): every timed window behind that figure (for a ratio: its own or the baseline's) was shared "
    "with other processes (CPUs or GPU), so it says more about the load than about the config; it is not "
    "trusted."
)
UNJUDGED_NOTE = (
    "(unjudged): nothing recorded whether other processes shared the timed windows behind that figure (for "
    "a ratio: its own or the baseline's): a window too short to judge (under a quarter second) or a run "
    "stopped early before it reported the CPU load; it is not trusted either."
)
NOTES: dict[Trust, str] = {"contended": CONTENDED_NOTE, "unjudged": UNJUDGED_NOTE}
UNTRUSTED_HEAD = "**Not trusted: the speed figures were taken while other processes kept the machine busy.**"
UNTRUSTED_ANSWER = (
    f"{UNTRUSTED_HEAD} The re-measure timed its contended windows again and the load stayed, so no winner is "
    "crowned on them (exit 4); run the search again on a quiet machine."
)
# The same where no winner was refused (the baseline stays for its loss check or an empty screen, or a
# summary from before `untrusted` covered the baseline's figure): the figures the answer gives are marked.
UNTRUSTED_FIGURES = (
    f"{UNTRUSTED_HEAD} The figures marked (contended) or (unjudged) below say more about the load than about "
    "the configs; run the search again on a quiet machine to trust them."
)
