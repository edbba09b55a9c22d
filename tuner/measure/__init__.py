"""Measuring while the search runs: the baseline's speed and its loss runs (`baseline`), the screen's wall
budget and the clock it sets (`screen_budget`; the clock itself is tuner/runs/screen_clock.py), and the
estimate of the phases left (`eta`).
"""
