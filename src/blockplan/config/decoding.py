"""`decoding.*`, `rollouts.*`, `pipeline.*`, `flow.*`: how an answer is decoded."""

from __future__ import annotations

from dataclasses import dataclass

from blockplan.config.fields import (
    MAX_DENOISE_STEPS,
    _check,
    _check_fields,
    bounded,
    choice,
    signed,
)

STRATEGIES = (
    "ar",
    "full_diffusion",
    "section_diffusion",
    "scaffold_spec",
    "rollouts",
    "pipelined",
    "dflash",
)
# strategies that need more than the model folder (dflash: a drafter folder, the torch backend)
DRAFTER_STRATEGIES = ("dflash",)
MODEL_STRATEGIES = tuple(s for s in STRATEGIES if s not in DRAFTER_STRATEGIES)
SPEC_WINDOWS = ("adaptive", "block")
ROLLOUT_DECODINGS = ("scaffold_spec", "ar")


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding strategy and its knobs (docs/ALGORITHMS.md §4)."""

    strategy: str = choice("scaffold_spec", STRATEGIES)
    confidence_threshold: float = bounded(0.9, 0.0, 1.0)
    max_denoise_steps: int = 64
    # scaffold_spec / rollouts: the previous plan's answer is each block's first draft (no
    # draft forward); fewer forwards when consecutive answers agree, the same tokens
    draft_from_previous: bool = True
    # scaffold_spec / rollouts: the free-text section (the explanation) is drafted from the
    # model folder's answer n-gram table (draft_ngrams.json) where it has one, instead of a
    # draft forward; the same tokens, fewer forwards
    ngram_drafts: bool = True
    # scaffold spec's verify windows: "adaptive" (a block's first window is the whole block;
    # after a rejection the next covers at most twice the editable slots the last one
    # decided) or "block" (always the rest of the block). Only the forwards change.
    spec_window: str = choice("adaptive", SPEC_WINDOWS)
    # dflash: the drafter folder (blockplan train-drafter; config.json, model.safetensors and
    # a manifest, made for this model's decoder weights), found as model.dir is (as given,
    # else under the package root); "" none
    drafter: str = ""

    def __post_init__(self) -> None:
        _check_fields(self, "decoding")
        _check(
            0.0 < self.confidence_threshold <= 1.0,
            "decoding.confidence_threshold",
            self.confidence_threshold,
            "must be in (0, 1]",
        )
        _check(
            1 <= self.max_denoise_steps <= MAX_DENOISE_STEPS,
            "decoding.max_denoise_steps",
            self.max_denoise_steps,
            f"must be in [1, {MAX_DENOISE_STEPS}]",
        )


@dataclass(frozen=True)
class RolloutConfig:
    """Shared-prefix test-time scaling: N trajectory rollouts sampled at `temperature`.

    `max_deviation_m`: before averaging, a rollout is dropped when one of its waypoints lies
    farther than this from the waypoint-wise median of the N rollouts (one wrong leading digit
    of a fixed-width number moves a waypoint by 10 m or more); 0 keeps every rollout. At least
    the median-closest rollout is always kept."""

    num_rollouts: int = bounded(4, 1, 64)
    temperature: float = signed(0.5, ">= 0")
    seed: int = 0
    max_deviation_m: float = signed(5.0, ">= 0")
    # How the N forked rows decode the trajectory: "scaffold_spec" (drafts coupled to the
    # verify's uniforms; the faster on real sequences, where the model is sure and drafts
    # run long) or "ar" (one token per forward for all N rows: faster where drafts are short,
    # e.g. an unsure model on a CPU, where every row of a window costs). The same tokens.
    trajectory_decoding: str = choice("scaffold_spec", ROLLOUT_DECODINGS)

    def __post_init__(self) -> None:
        _check_fields(self, "rollouts")
        _check(
            1 <= self.num_rollouts <= 64,
            "rollouts.num_rollouts",
            self.num_rollouts,
            "must be in [1, 64]",
        )


@dataclass(frozen=True)
class PipelineConfig:
    """Pipelined block decoding (docs/ALGORITHMS.md §8): a block joins the active set
    semi-activated once its predecessor's completion ratio reaches `add_threshold` (it then
    commits only tokens whose confidence exceeds `semi_confidence`) and is fully activated
    once the predecessor reaches `activate_threshold` (it also commits at least
    ceil(remaining / `commit_divisor`) of its unknown tokens per step, by confidence). The
    first block whose predecessors are complete decodes as in section diffusion. With
    add_threshold = 1 the pipeline is serial block diffusion. The defaults (0, 0) put every
    block in flight, fully activated, from the first forward: on the shipped robot student
    they take 4.8 forwards per chunk instead of 15.6 at (0.3, 0.7), at a lower action error
    (docs/DECODING.md "Pipelined decoding")."""

    add_threshold: float = bounded(0.0, 0.0, 1.0)
    activate_threshold: float = bounded(0.0, 0.0, 1.0)
    semi_confidence: float = bounded(0.5, 0.0, 1.0)
    commit_divisor: int = 3

    def __post_init__(self) -> None:
        _check(
            0.0 <= self.add_threshold <= 1.0,
            "pipeline.add_threshold",
            self.add_threshold,
            "must be in [0, 1]",
        )
        _check(
            self.add_threshold <= self.activate_threshold <= 1.0,
            "pipeline.activate_threshold",
            self.activate_threshold,
            f"must be in [add_threshold, 1] = [{self.add_threshold}, 1]",
        )
        _check(
            0.0 < self.semi_confidence <= 1.0,
            "pipeline.semi_confidence",
            self.semi_confidence,
            "must be in (0, 1]",
        )
        _check(
            self.commit_divisor >= 1,
            "pipeline.commit_divisor",
            self.commit_divisor,
            "must be >= 1",
        )


@dataclass(frozen=True)
class FlowConfig:
    """The flow-matching trajectory head (models with `trajectory_head: flow`,
    docs/ALGORITHMS.md §7.1): `num_steps` Euler steps from Gaussian noise; the head runs
    at `evaluate_steps` (1-based, must include 1) and every other step reuses the last
    computed velocity (adaptive step caching); an empty list evaluates every step.
    Token-head models ignore this section."""

    num_steps: int = 8
    evaluate_steps: tuple[int, ...] = (1, 2, 7, 8)

    def __post_init__(self) -> None:
        _check(1 <= self.num_steps <= 256, "flow.num_steps", self.num_steps, "must be in [1, 256]")
        steps = self.evaluate_steps
        _check(
            all(isinstance(k, int) and not isinstance(k, bool) for k in steps),
            "flow.evaluate_steps",
            list(steps),
            "must be a list of integers",
        )
        _check(
            not steps or (1 in steps and all(1 <= k <= self.num_steps for k in steps)),
            "flow.evaluate_steps",
            list(steps),
            f"must include step 1 and lie in [1, num_steps={self.num_steps}] (empty: all)",
        )
        _check(
            len(set(steps)) == len(steps),
            "flow.evaluate_steps",
            list(steps),
            "must not repeat a step",
        )
