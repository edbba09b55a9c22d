"""The driver process and its Ray: where Ray runs and the driver's hold on it (`ray_session`), one search per
OUT (`out_lock`), the compile caches served to other nodes (`cache_server`), a trial lost with its node
(`node_loss`), stop signals and the streams a closed pipe leaves (`stop_signals`, `streams`), Ray's log noise
(`ray_noise`), and the reaper that ends a dead driver's local Ray (`python -m tuner.session.reaper`).
"""
