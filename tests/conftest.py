"""Shared test set-up: Ray runs locally without token auth and sends no usage stats (set before any import);
the caches a search keeps between searches (compile caches, remembered answers) live in a folder of this
session's, never the user's, and every search starts fresh unless a test asks for a remembered answer."""

import os
import tempfile

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TUNER_CACHE_DIR", tempfile.mkdtemp(prefix="tuner-test-cache-"))
os.environ.setdefault("TUNER_FRESH", "1")
