"""The phases of a search, in the order `tuner.pipeline.run_search` calls them.

Each is a plain function over a frozen record of what it reads of the search (`ProbeInputs`, `ScreenInputs`,
`LossCheckInputs`, `RemeasureInputs`, `FinishInputs`, each built from the `SearchContext` in
tuner/pipeline.py) that returns typed records (`TrialRow`s, `LossCheck`): probe, screen, loss_check,
remeasure; `finish` turns their rows into the summary, the reports and best.yaml.
"""
