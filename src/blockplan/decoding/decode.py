"""`decode`: run one named strategy on a prompt and a scaffold — the engine's entry point.

The engine knows nothing about tokenization or JSON: it gets prompt embeddings, the prompt's
attention mask and a `Scaffold`, and returns answer token ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from blockplan.config import STRATEGIES, PlannerConfig
from blockplan.decoding.block_loop import AnswerState, DecodeContext, TokenModel
from blockplan.decoding.constraints import AnswerConstraints
from blockplan.decoding.device import synchronize
from blockplan.decoding.dflash import FeatureStore, decode_dflash
from blockplan.decoding.flow import FlowSampler, flow_noise
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.ngrams import AnswerNgrams
from blockplan.decoding.picking import SamplingPicker, rollout_streams
from blockplan.decoding.pipelined import PipelineOptions, decode_pipelined
from blockplan.decoding.strategies import (
    decode_ar,
    decode_full_diffusion,
    decode_rollouts,
    decode_scaffold_spec,
    decode_section_diffusion,
    decode_text_sections,
    prefill,
    rollout_section,
)
from blockplan.model.drafter import Drafter
from blockplan.model.positions import PromptPositions
from blockplan.schema.layout import Scaffold


@dataclass(frozen=True)
class DecodeOptions:
    strategy: str = "scaffold_spec"
    confidence_threshold: float = 0.9
    max_denoise_steps: int = 64
    num_rollouts: int = 1
    temperature: float = 0.5
    seed: int = 0
    stream_salt: int = 0  # mixed into the rollout streams (the planner: observation stamp)
    pipeline: PipelineOptions | None = None  # pipelined: thresholds (None: the defaults)
    spec_window: str = "adaptive"  # scaffold spec's windows (`decoding.spec_window`)
    # how the forked rollouts decode the trajectory: "scaffold_spec" or "ar"
    # (`rollouts.trajectory_decoding`)
    rollout_trajectory: str = "scaffold_spec"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy={self.strategy!r}: must be one of {list(STRATEGIES)}")
        if self.num_rollouts < 1:
            raise ValueError(f"num_rollouts={self.num_rollouts}: must be >= 1")
        if self.spec_window not in ("adaptive", "block"):
            raise ValueError(f"spec_window={self.spec_window!r}: must be 'adaptive' or 'block'")
        if self.rollout_trajectory not in ("scaffold_spec", "ar"):
            raise ValueError(
                f"rollout_trajectory={self.rollout_trajectory!r}: must be 'scaffold_spec' or 'ar'"
            )

    @classmethod
    def from_config(cls, config: PlannerConfig, strategy: str | None = None) -> DecodeOptions:
        strategy = strategy or config.decoding.strategy
        return cls(
            strategy=strategy,
            confidence_threshold=config.decoding.confidence_threshold,
            max_denoise_steps=config.decoding.max_denoise_steps,
            num_rollouts=config.rollouts.num_rollouts if strategy == "rollouts" else 1,
            temperature=config.rollouts.temperature,
            seed=config.rollouts.seed,
            pipeline=PipelineOptions(
                confidence_threshold=config.decoding.confidence_threshold,
                add_threshold=config.pipeline.add_threshold,
                activate_threshold=config.pipeline.activate_threshold,
                semi_confidence=config.pipeline.semi_confidence,
                commit_divisor=config.pipeline.commit_divisor,
            ),
            spec_window=config.decoding.spec_window,
            rollout_trajectory=config.rollouts.trajectory_decoding,
        )


@dataclass(frozen=True)
class DecodeResult:
    """tokens: (N, A) answer ids (N rollouts, else 1). timings_ms: prefill and per section.
    active_blocks: pipelined, the blocks denoised by each forward. waypoints: a flow head's
    (N, 5, 2) waypoints (m); `tokens` then hold the mask id at the trajectory's editable
    slots, which the caller's codec fills. flow_evaluations: the head forwards it made."""

    tokens: np.ndarray
    num_forwards: int
    num_spec_steps: int
    timings_ms: dict[str, float]
    active_blocks: tuple[int, ...] = ()
    waypoints: np.ndarray | None = None
    flow_evaluations: int = 0
    num_draft_forwards: int = 0  # dflash: the drafter's forwards (not in num_forwards)


def cached_strategy(
    options: DecodeOptions, drafter: Drafter | None = None
) -> Callable[[DecodeContext, AnswerState], None]:
    """The block-loop decoder (after the prompt prefill) of `options.strategy`: every strategy
    but `full_diffusion`. Raises ValueError naming the valid strategies for any other name."""
    name = options.strategy
    if name == "ar":
        return decode_ar
    if name == "dflash":
        if drafter is None:
            raise ValueError("strategy='dflash': needs a drafter (decoding.drafter)")
        return lambda ctx, state: decode_dflash(ctx, state, drafter, options.spec_window)
    if name == "scaffold_spec":
        return lambda ctx, state: decode_scaffold_spec(ctx, state, window=options.spec_window)
    if name == "section_diffusion":
        return lambda ctx, state: decode_section_diffusion(ctx, state, options.confidence_threshold)
    if name == "rollouts":

        def run_rollouts(ctx: DecodeContext, state: AnswerState) -> None:
            streams = rollout_streams(options.seed, options.num_rollouts, options.stream_salt)
            picker = SamplingPicker(options.temperature, streams)
            decode_rollouts(
                ctx,
                state,
                picker,
                options.num_rollouts,
                options.rollout_trajectory,
                options.spec_window,
            )

        return run_rollouts
    if name == "pipelined":
        pipeline = options.pipeline or PipelineOptions(options.confidence_threshold)
        return lambda ctx, state: decode_pipelined(ctx, state, pipeline)
    raise ValueError(f"strategy={name!r}: must be one of {list(STRATEGIES)}")


@torch.no_grad()
def decode(
    model: TokenModel,
    embeds: torch.Tensor,  # (1, P, W) prompt embeddings
    prompt_mask: torch.Tensor,  # (P, P) bool
    scaffold: Scaffold,
    options: DecodeOptions,
    cache: KVCache | None = None,
    constraints: AnswerConstraints | None = None,
    prefill_with: Callable[[DecodeContext, torch.Tensor, torch.Tensor], AnswerState] | None = None,
    positions: PromptPositions | None = None,
    cache_attention: str = "causal",
    flow: FlowSampler | None = None,
    draft_hint: np.ndarray | None = None,
    draft_ngrams: AnswerNgrams | None = None,
    drafter: Drafter | None = None,
) -> DecodeResult:
    """Decode the answer of `scaffold` after the prompt with `options.strategy`.

    `cache` (reset here) must hold P + A slots and `num_rollouts` rows; one is made if None.
    `constraints` restrict each editable slot to tokens the schema's parser accepts.
    `prefill_with(ctx, embeds, prompt_mask)` replaces the prompt prefill (the streaming
    prefill, streaming/prefill.py); it must commit the P prompt slots to `ctx.cache`.
    `positions`: the prompt's rotary positions when they are not 0..P-1 (multimodal RoPE).
    `cache_attention`: how the diffusion strategies write a finished block's K/V, "causal" or
    "block" (`PlannerModelConfig.cache_attention`).
    `flow`: the model's flow trajectory head — the text sections are decoded with the
    strategy (`strategies.FLOW_STRATEGIES`), then the head integrates N noise samples over
    the forked prefix (N = `num_rollouts` for `rollouts`, else 1).
    `draft_hint`: (A,) a guess of the answer (the previous plan's) that `scaffold_spec` and the
    greedy part of `rollouts` propose before drafting with the model; it changes how many
    forwards the answer takes, never which tokens it has. A hint whose shape or structural
    tokens do not match `scaffold` is not used.
    `draft_ngrams`: the answer n-gram table (decoding/ngrams.py) scaffold spec proposes the
    free-text sections from; again only the forward count depends on it.
    `drafter`: the DFlash drafter (bound to `model`'s decoder) the `dflash` strategy drafts
    with; `model` must then return the hidden states `Decoder.forward(hidden_layers=...)`
    does (the torch backend).
    """
    P, A = embeds.shape[1], len(scaffold)
    if cache is None:
        cache = KVCache.for_model(
            model.decoder_config, P + A, options.num_rollouts, embeds.dtype, embeds.device
        )
    cache.reset()
    if cache_attention not in ("causal", "block"):
        raise ValueError(f"cache_attention={cache_attention!r}: must be 'causal' or 'block'")
    ctx = DecodeContext(
        model,
        cache,
        scaffold,
        P,
        (scaffold.mask_id,),
        constraints,
        positions=positions,
        cache_attention=cache_attention,
        hint=usable_hint(draft_hint, scaffold, model.decoder_config.vocab_size),
        ngrams=draft_ngrams,
    )
    if options.strategy == "dflash" and flow is None and drafter is not None:
        ctx.features = FeatureStore(drafter, options.num_rollouts, A)
    t0 = time.perf_counter()
    if flow is not None:
        return _decode_with_flow(ctx, embeds, prompt_mask, options, flow, prefill_with)
    if options.strategy == "full_diffusion":
        state = decode_full_diffusion(
            ctx, embeds, prompt_mask, options.confidence_threshold, options.max_denoise_steps
        )
        timings = {"full_diffusion": (time.perf_counter() - t0) * 1e3}
    else:
        run_blocks = cached_strategy(options, drafter)  # a bad name fails before any forward
        state = (prefill_with or prefill)(ctx, embeds, prompt_mask)
        synchronize(embeds.device)
        timings = {"prefill": (time.perf_counter() - t0) * 1e3}
        run_blocks(ctx, state)
        timings.update(ctx.stats.section_ms)
    if not state.is_known.all():
        raise RuntimeError(f"{options.strategy}: answer slots left undecided")  # a bug
    return DecodeResult(
        tokens=state.tokens.cpu().numpy(),
        num_forwards=ctx.stats.num_forwards,
        num_spec_steps=ctx.stats.num_spec_steps,
        timings_ms=timings,
        active_blocks=tuple(ctx.stats.active_blocks),
        num_draft_forwards=ctx.stats.num_draft_forwards,
    )


def usable_hint(
    hint: np.ndarray | None, scaffold: Scaffold, vocab_size: int
) -> torch.Tensor | None:
    """The hint (A,) as ids, or None when it does not fit the scaffold's layout or the
    vocabulary."""
    if hint is None:
        return None
    hint = np.asarray(hint)
    ids = np.asarray(scaffold.token_ids)
    structural = ~np.asarray(scaffold.is_editable)
    if hint.shape != ids.shape or not np.array_equal(hint[structural], ids[structural]):
        return None
    if hint.min() < 0 or hint.max() >= vocab_size:
        return None
    return torch.from_numpy(hint.astype(np.int64))


def _decode_with_flow(
    ctx: DecodeContext,
    embeds: torch.Tensor,
    prompt_mask: torch.Tensor,
    options: DecodeOptions,
    flow: FlowSampler,
    prefill_with: Callable[[DecodeContext, torch.Tensor, torch.Tensor], AnswerState] | None,
) -> DecodeResult:
    """Text sections by the strategy, then the flow head over the (forked) prefix cache."""
    from blockplan.decoding.strategies import FLOW_STRATEGIES

    if options.strategy not in FLOW_STRATEGIES:
        raise ValueError(
            f"decoding.strategy={options.strategy!r}: a flow trajectory head decodes its text "
            f"with one of {list(FLOW_STRATEGIES)}"
        )
    t0 = time.perf_counter()
    state = (prefill_with or prefill)(ctx, embeds, prompt_mask)
    synchronize(embeds.device)
    timings = {"prefill": (time.perf_counter() - t0) * 1e3}
    decode_text_sections(
        ctx, state, options.strategy, options.confidence_threshold, options.spec_window
    )
    timings.update(ctx.stats.section_ms)
    t1 = time.perf_counter()
    n = options.num_rollouts if options.strategy == "rollouts" else 1
    if n > 1:
        ctx.cache.fork(n)
        state.fork(n)
    noise = flow_noise(options.seed, n, options.stream_salt)
    waypoints, calls = flow.sample(ctx.cache, noise)
    synchronize(embeds.device)
    timings["trajectory"] = (time.perf_counter() - t1) * 1e3
    trajectory = rollout_section(ctx.scaffold)
    before = state.is_known[:, : trajectory.start]
    if not before.all():
        raise RuntimeError(f"{options.strategy}: text slots left undecided")  # a bug
    return DecodeResult(
        tokens=state.tokens.cpu().numpy(),
        num_forwards=ctx.stats.num_forwards,
        num_spec_steps=ctx.stats.num_spec_steps,
        timings_ms=timings,
        waypoints=waypoints,
        flow_evaluations=calls,
    )
