"""The rules a search config states, below the config that states them: the loss rule (`loss_limit`:
LossLimit, its one home, and where its tolerance came from, ToleranceFrom), how far the loss runs train
(`horizon`: LossHorizon, parse_tokens), the batch pairs the space allows (`batch_pairs`), and the base of the
search's typed records that the loss limit is one of (`record_base`: Record). They import nothing of tuner's
but each other, so tuner/config.py, tuner/state and tuner/decide all build on them.
"""
