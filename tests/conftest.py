"""Shared test set-up: Ray runs locally without token auth and sends no usage stats (set before any import)."""

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
