"""What a search leaves and remembers: the typed records that cross module boundaries and make summary.json
(`records`, `gpu_records`, `loss_outcome`, their base `Record` in tuner/rules/record_base.py, and `trial_rows` for a ledger row's fields), OUT/state.json
with each finished phase's result and the errors a phase ends a search with (`search_state`), OUT's state files
after damage (`state_files`), answers remembered across searches (`answers`), and the compile caches kept
on this machine (`caches`, also `python -m tuner.state.caches`).
"""
