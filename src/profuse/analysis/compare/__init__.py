"""The compare wing: two runs (diff, per-step samples and their noise test, memory) and many ranks."""
