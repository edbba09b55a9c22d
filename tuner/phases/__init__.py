"""The phases of a search, in the order `tuner.search.run_search` calls them.

Each is a plain function over the `SearchContext` that returns typed records (`TrialRow`s): baseline,
probe, screen, loss_check, remeasure; `finish` turns their rows into the summary, the reports and best.yaml.
"""
