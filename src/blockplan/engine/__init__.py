"""The decoding engine: KV cache, decoding strategies and the Planner."""
