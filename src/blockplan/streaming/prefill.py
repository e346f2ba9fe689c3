"""Streaming frame window: an incremental prompt prefill that reuses frames by identity.

Each control tick brings new frames; most of the window's frames were already in an earlier
window, at another slot (view-major prompt: camera k's frames oldest → newest occupy image
spans k·T … k·T+T−1). docs/ALGORITHMS.md §6, docs/DECODING.md "Streaming".

`StreamingPrefill` keeps the pre-RoPE keys and the values of the prompt header and of every
frame an earlier window held (per frame key, streaming/frame_cache.py, while a later window may
still pick the frame). On a tick it commits to the cache: the header (unchanged), the frames
it does not hold (one forward over all of them, each at its current slot, seeing its own
frame — and the header when the model's layout attends to it), the frames it holds (their
stored pre-RoPE keys rotated at their current positions, whatever slot that is), then
recomputes every text token after the header (one forward: the text attends to the frames,
and its positions are the same every tick). A full prefill happens only when nothing can be
reused: the first tick, after `reset`, a changed camera set, a time jump (a camera's newest
stamp went back), a gap (it advanced by more than the retention span) or a window that shares
no frame — each counted by reason. After a disjoint window the frames held before stay held
(only the others reset the store), so streaming resumes as soon as a window meets one again.

Exactness. Under RoPE the score of query i and key j depends only on their distance, so a
token's hidden states at every layer depend only on the inputs and distances of the tokens it
(transitively) attends to. A frame whose tokens attend to their own frame only (model setting
`visual_attention="frame_only"`) and whose inputs carry no slot-dependent embedding
(`frame_slot_embedding=False`) therefore has the same pre-RoPE keys and values in every slot,
and rotating those keys at the new positions gives exactly the K/V a full recompute would
write. With the default layout (frames also attend to the header, frame-slot embedding) a
moved frame's deeper K/V depend on its distance to the header and on its slot embedding, so
reuse is approximate: streaming is opt-in there and the bench measures the drift.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from blockplan.decoding.block_loop import AnswerState, DecodeContext
from blockplan.decoding.strategies import prefill as full_prefill
from blockplan.schema.layout import PromptLayout
from blockplan.streaming.frame_cache import FrameKey, VisionFeatureCache, frame_key, retain
from blockplan.types import CameraFrame

__all__ = ["FrameKey", "StreamingPrefill", "StreamingStats", "VisionFeatureCache", "frame_key"]

FULL_PREFILL_REASONS = ("first", "reset", "cameras", "time_jump", "gap", "disjoint")


@dataclass
class StreamingStats:
    ticks: int = 0
    streamed: int = 0  # ticks that reused cached frames
    full_prefills: Counter[str] = field(default_factory=Counter)  # by reason
    frames_computed: int = 0  # frames whose K/V a forward computed
    frames_reused: int = 0  # frames whose K/V came from the cache

    @property
    def num_full_prefills(self) -> int:
        return sum(self.full_prefills.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "ticks": self.ticks,
            "streamed_ticks": self.streamed,
            "full_prefills": self.num_full_prefills,
            "full_prefill_reasons": dict(self.full_prefills),
            "frames_computed": self.frames_computed,
            "frames_reused": self.frames_reused,
        }


class StreamingPrefill:
    """The prompt prefill of consecutive ticks, reusing frames' K/V by key (see the module)."""

    def __init__(
        self,
        layout: PromptLayout,
        num_cameras: int,
        num_frames: int,
        attend_header: bool,
        span_ns: int,
        capacity: int = 0,
    ) -> None:
        """span_ns: how far before a camera's newest frame a frame may still be reused (and
        the largest step of the newest frame that is not a gap); capacity: stored frames per
        camera at most (default 3·T)."""
        K, T = num_cameras, num_frames
        self.K, self.T, self.P = K, T, len(layout)
        self.header_end = layout.header_end
        self.attend_header = attend_header
        self.span_ns = span_ns
        self.capacity = capacity or 3 * T
        spans = sorted(layout.image_spans, key=lambda s: (s.camera_index, s.frame_index))
        if len(spans) != K * T:
            raise ValueError(f"StreamingPrefill: {len(spans)} image spans for {K}x{T} frames")
        self.G = spans[0].end - spans[0].start
        # (K*T, G) prompt positions of every frame slot's visual tokens, view-major.
        self.image_positions = torch.tensor(
            [list(range(s.start, s.end)) for s in spans], dtype=torch.long
        )
        is_text = torch.ones(self.P, dtype=torch.bool)
        is_text[: self.header_end] = False
        is_text[self.image_positions.reshape(-1)] = False
        self.text_positions = is_text.nonzero()[:, 0]  # (S_text,) ascending, last = P - 1
        self.stats = StreamingStats()
        self._reset("first")

    def _reset(self, reason: str) -> None:
        self._window: tuple[FrameKey, ...] | None = None
        self._header: tuple[torch.Tensor, torch.Tensor] | None = None  # (layers, Hkv, h, D) x2
        self._frames: dict[FrameKey, tuple[torch.Tensor, torch.Tensor]] = {}  # (layers, Hkv, G, D)
        self._reason = reason

    def reset(self) -> None:
        """Forget every frame: the next tick is a full prefill (reason `reset`)."""
        self._reset("reset")

    @property
    def num_stored_frames(self) -> int:
        return len(self._frames)

    def bind(self, frames: Sequence[CameraFrame]) -> Callable[..., AnswerState]:
        """The prefill for one tick whose view-major `frames` are given (for `decode`)."""
        window = tuple(frame_key(f) for f in frames)

        def run(ctx: DecodeContext, embeds: torch.Tensor, mask: torch.Tensor) -> AnswerState:
            return self.prefill(ctx, embeds, mask, window)

        return run

    def classify(self, window: tuple[FrameKey, ...]) -> str | None:
        """The full-prefill reason of `window` (view-major keys), or None: stream it."""
        old = self._window
        if old is None or self._header is None:
            return self._reason
        T = self.T
        if [k[0] for k in window[::T]] != [k[0] for k in old[::T]]:
            return "cameras"
        newest = [max(k[1] for k in window[i : i + T]) for i in range(0, len(window), T)]
        before = [max(k[1] for k in old[i : i + T]) for i in range(0, len(old), T)]
        if any(n < b for n, b in zip(newest, before, strict=True)):
            return "time_jump"
        if any(n - b > self.span_ns for n, b in zip(newest, before, strict=True)):
            return "gap"
        if not any(k in self._frames for k in window):
            return "disjoint"
        return None

    def prefill(
        self,
        ctx: DecodeContext,
        embeds: torch.Tensor,  # (1, P, W)
        mask: torch.Tensor,  # (P, P) the model's prompt mask (full prefill only)
        window: tuple[FrameKey, ...],
    ) -> AnswerState:
        if len(window) != self.K * self.T:
            raise ValueError(f"StreamingPrefill: {len(window)} frames, needs {self.K * self.T}")
        self.stats.ticks += 1
        reason = self.classify(window)
        self._window = window
        if reason is not None:
            self.stats.full_prefills[reason] += 1
            self.stats.frames_computed += len(window)
            state = full_prefill(ctx, embeds, mask)
            # A disjoint window changes nothing the held frames depend on (same cameras,
            # same timeline, within the span): keep them, a later window may pick them again
            # (the frame window prefers frames any earlier request used). Forgetting them
            # here made every window after a pause in requests (a burst of bad odometry)
            # disjoint again, so streaming never resumed.
            self._harvest(ctx, window, keep_held=reason == "disjoint")
            return state
        self.stats.streamed += 1
        state = self._stream(ctx, embeds, window)
        self._frames = retain(self._frames, window, self.span_ns, self.capacity)
        return state

    def _harvest(
        self, ctx: DecodeContext, window: tuple[FrameKey, ...], keep_held: bool = False
    ) -> None:
        """Keep the header's and every frame's pre-RoPE keys and values from a full prefill
        (cache slots = prompt positions); frames of earlier windows are forgotten unless
        `keep_held` (then the usual retention applies)."""
        cache, h = ctx.cache, self.header_end
        raw, values = cache.raw_keys[:, 0], cache.kv[:, 1, 0]  # (layers, Hkv, L, D) each
        self._header = raw[:, :, :h].clone(), values[:, :, :h].clone()
        held = self._frames if keep_held else {}
        self._frames = {}
        for key, pos in zip(window, self.image_positions, strict=True):
            if key not in self._frames:
                self._frames[key] = raw[:, :, pos].clone(), values[:, :, pos].clone()
        if held:
            self._frames = retain({**held, **self._frames}, window, self.span_ns, self.capacity)

    def _stream(
        self, ctx: DecodeContext, embeds: torch.Tensor, window: tuple[FrameKey, ...]
    ) -> AnswerState:
        assert self._header is not None  # classify checked
        cache, model, G, h = ctx.cache, ctx.model, self.G, self.header_end
        cache.append(*self._header, torch.arange(h))  # header: same K/V every tick
        new = [i for i, key in enumerate(window) if key not in self._frames]
        kept = [i for i, key in enumerate(window) if key in self._frames]
        if new:
            # Every frame not held, at its current slot: its tokens see their own frame (and
            # the header when the layout attends to it).
            N = len(new)
            pos = self.image_positions[new].reshape(-1)  # (N*G,)
            new_mask = torch.zeros(N * G, h + N * G, dtype=torch.bool)
            new_mask[:, :h] = self.attend_header
            for j in range(N):
                new_mask[j * G : (j + 1) * G, h + j * G : h + (j + 1) * G] = True
            model(
                inputs_embeds=embeds[:, pos],
                positions=pos,
                mask=new_mask,
                cache=cache,
                num_logits=0,
            )
            ctx.stats.num_forwards += 1
            cache.commit(N * G)
            raw = cache.raw_keys[:, 0, :, h : h + N * G]  # (layers, Hkv, N*G, D)
            values = cache.kv[:, 1, 0, :, h : h + N * G]
            for j, i in enumerate(new):
                if window[i] not in self._frames:  # a frame twice in the window: the first
                    part = slice(j * G, (j + 1) * G)
                    self._frames[window[i]] = raw[:, :, part].clone(), values[:, :, part].clone()
        self.stats.frames_computed += len(new)
        self.stats.frames_reused += len(kept)
        if kept:
            # Held frames: pre-RoPE keys rotated at their current positions, values as stored.
            keys = torch.cat([self._frames[window[i]][0] for i in kept], dim=2)  # (l, Hkv, n, D)
            values = torch.cat([self._frames[window[i]][1] for i in kept], dim=2)
            cache.append(keys, values, self.image_positions[kept].reshape(-1))
        # Text after the header: attends to every slot at an earlier position, and causally
        # among itself (the cache slots are not in prompt order; the mask is by position).
        text = self.text_positions  # (S,)
        past = cache.positions[0, : cache.length].cpu()  # (L,)
        text_mask = torch.cat(
            [past[None] <= text[:, None], text[None] <= text[:, None]], dim=1
        )  # (S, L + S)
        logits = model(
            inputs_embeds=embeds[:, text],
            positions=text,
            mask=text_mask,
            cache=cache,
            num_logits=1,
        )  # (1, 1, V) predicting the first answer slot
        ctx.stats.num_forwards += 1
        cache.commit(len(text))
        return AnswerState.start(ctx.scaffold, ctx.restrict(logits)[:, -1])
