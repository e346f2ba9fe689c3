"""The streaming frame window (docs/DECODING.md "Streaming"): per-frame caches of vision
features and K/V (`frame_cache.py`) and the incremental prompt prefill that reuses them
(`prefill.py`)."""
