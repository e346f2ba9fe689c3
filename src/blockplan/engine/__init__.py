"""The decoding engine: KV cache, decoding strategies and the Planner.

planner = Planner.from_folder("models/blockplan-tiny", config)   # or Planner.random_init
plan = planner.plan(observation)                                 # strategy from config
"""

from blockplan.engine.decode import DecodeOptions, DecodeResult, decode
from blockplan.engine.kv_cache import KVCache, KVCacheFullError
from blockplan.engine.planner import DecodedPlan, Planner, PlannerSetupError

__all__ = [
    "DecodeOptions",
    "DecodeResult",
    "DecodedPlan",
    "KVCache",
    "KVCacheFullError",
    "Planner",
    "PlannerSetupError",
    "decode",
]
