"""Measuring while the search runs: the baseline's speed and its loss runs (`baseline`), when the screen
stops proposing and ends (`screen_clock`), the estimate of the phases left (`eta`), and why a phase's
progress stalled (`stall`).
"""
