"""Which config wins, and why: the loss rule (`loss_limit`, its one home), how far the loss check trains
(`horizon`), which candidates it trains and when it stops (`loss_plan`; how it ended: tuner/state/loss_outcome.py), which configs are
feasible and which is fastest (`select`), what the answer costs the user (`costs`), and where one run of the
winner and one of the baseline should put their ratio (`ratio`).
"""
