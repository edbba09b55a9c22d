"""Which config wins, and why, by the loss rule and its horizon (tuner/rules/): which candidates the loss check
trains and when it stops (`loss_plan`; how it ended: tuner/state/loss_outcome.py), which configs are
feasible and which is fastest (`select`), each finalist's figures and when the baseline's further runs can
no longer change the answer (`finalists`), what the answer costs the user (`costs`), and where one run of
the winner and one of the baseline should put their ratio (`ratio`).
"""
