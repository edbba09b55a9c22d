"""The phases of a search, in the order `tuner.pipeline.run_search` calls them.

Each is a plain function over a frozen record of what it reads of the search (`ProbeInputs`, `ScreenInputs`,
`LossCheckInputs`, `RemeasureInputs`, `FinishInputs`, each built from the `SearchContext` in
tuner/pipeline.py) that returns typed records (`TrialRow`s, `LossCheck`): `probe.largest_batches`,
`screen.time_proposals`, `loss_check.check_losses`, `remeasure.time_finalists`; `finish.summarize` and
`finish.write` turn their rows into the summary, the reports and best.yaml.
"""
