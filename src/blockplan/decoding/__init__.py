"""The decoding core: the KV cache, one block loop and the strategies run on it, token
picking, answer constraints, and `decode`, its entry point (docs/DECODING.md).

It knows nothing about images, prompts or JSON: `blockplan.planner` builds the prompt and the
scaffold, calls `decode` and parses the answer.
"""

from blockplan.decoding.decode import DecodeOptions, DecodeResult, decode
from blockplan.decoding.kv_cache import KVCache, KVCacheFullError

__all__ = [
    "DecodeOptions",
    "DecodeResult",
    "KVCache",
    "KVCacheFullError",
    "decode",
]
