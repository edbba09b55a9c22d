"""What the search may try: the knobs (`knobs`: which change what is trained, which only how it runs), the
space built from the YAML as Ray Tune domains (`domains`), the usual hand recipe and the screen's start
points (`recipe`), the screen's sampler, TPE told the speeds and the loss verdicts so far (`sampler`), the
Tune searcher over it that never proposes a config twice (`searcher`), and the batch sizes
that fit in memory (`batch_finder` probes them on the GPU, `batch_fit` reads what it found).
"""
