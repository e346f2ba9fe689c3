"""Streaming frame window: cached vision features and an incremental prompt prefill.

Each control tick brings one new frame per camera; the other T−1 frames of every camera are
the previous tick's, one frame slot earlier (view-major prompt: camera k's frames oldest →
newest occupy image spans k·T … k·T+T−1). ALGORITHMS.md §6, DECODING.md "Streaming".

* `VisionFeatureCache`: projected image features per frame, keyed by (camera, stamp, a
  content fingerprint). Only new frames go through the vision encoder; the identity
  embeddings (camera, frame slot, grid cell) are added every tick at the frame's current
  slot. Lossless.
* `StreamingPrefill`: keeps the pre-RoPE keys and the values of the prompt header and of
  every frame slot. On a tick that slides the window by one frame it commits to the cache:
  the header (unchanged), the new frames (one forward of K frames, at the tail slots), the
  kept frames (their stored pre-RoPE keys rotated at their new, one-frame-earlier positions)
  and then recomputes every text token after the header (one forward: the text attends to the
  frames, and its positions are the same every tick). Any other tick — the first, a gap, a
  time jump, a changed window — is a full prefill, counted by reason.

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

import numpy as np
import torch

from blockplan.engine.block_loop import AnswerState, DecodeContext
from blockplan.engine.strategies import prefill as full_prefill
from blockplan.model.vision import VisionTower
from blockplan.schema.layout import PromptLayout
from blockplan.types import CameraFrame

# (camera, stamp_ns, fingerprint of a pixel subsample): a degraded (black) frame that shares
# a real frame's camera and stamp must not share its features.
FrameKey = tuple[str, int, int]


def frame_key(frame: CameraFrame) -> FrameKey:
    pixels = np.ascontiguousarray(frame.image).reshape(-1)
    sample = pixels[:: max(1, pixels.size // 4096)]  # <= ~4 K bytes, strided over the image
    return frame.camera, frame.stamp_ns, hash((frame.image.shape, sample.tobytes()))


class VisionFeatureCache:
    """Projected features (G, W) per frame key; the window's visual tokens from them."""

    def __init__(self, tower: VisionTower, num_frames: int) -> None:
        self.tower = tower
        self.num_frames = num_frames
        self._features: dict[FrameKey, torch.Tensor] = {}
        self.frames_encoded = 0  # images that went through the encoder

    def clear(self) -> None:
        self._features.clear()

    @torch.no_grad()
    def __call__(self, frames: Sequence[CameraFrame], dtype: torch.dtype) -> torch.Tensor:
        """Visual tokens (K*T, G, W) of the view-major `frames` (checked by the caller)."""
        keys = [frame_key(f) for f in frames]
        missing = {k: f for k, f in zip(keys, frames, strict=True) if k not in self._features}
        if missing:
            images = torch.cat(
                [self.tower.preprocess(torch.tensor(f.image)[None]) for f in missing.values()]
            ).to(dtype)  # (N, 3, H, W)
            features = self.tower.project(images)  # (N, G, W)
            for key, feature in zip(missing, features, strict=True):
                self._features[key] = feature
            self.frames_encoded += len(missing)
        # Keep only the current window's frames: the cache stays K*T entries at most.
        self._features = {k: self._features[k] for k in keys}
        tokens = torch.stack([self._features[k] for k in keys])  # (K*T, G, W)
        T = self.num_frames
        index = torch.arange(len(keys))
        return self.tower.add_identity(tokens, index // T, index % T)  # (K*T, G, W)


@dataclass
class StreamingStats:
    ticks: int = 0
    streamed: int = 0  # ticks that reused the cached frames
    full_prefills: Counter[str] = field(default_factory=Counter)  # by reason
    frames_prefilled: int = 0  # frames whose K/V a forward computed

    @property
    def num_full_prefills(self) -> int:
        return sum(self.full_prefills.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "ticks": self.ticks,
            "streamed_ticks": self.streamed,
            "full_prefills": self.num_full_prefills,
            "full_prefill_reasons": dict(self.full_prefills),
            "frames_prefilled": self.frames_prefilled,
        }


class StreamingPrefill:
    """The prompt prefill of consecutive ticks, reusing the frames' K/V (see the module)."""

    def __init__(
        self,
        layout: PromptLayout,
        num_cameras: int,
        num_frames: int,
        attend_header: bool,
        max_gap_ns: int,
    ) -> None:
        K, T = num_cameras, num_frames
        self.K, self.T, self.P = K, T, len(layout)
        self.header_end = layout.header_end
        self.attend_header = attend_header
        self.max_gap_ns = max_gap_ns
        spans = sorted(layout.image_spans, key=lambda s: (s.camera_index, s.frame_index))
        if len(spans) != K * T:
            raise ValueError(f"StreamingPrefill: {len(spans)} image spans for {K}x{T} frames")
        self.G = spans[0].end - spans[0].start
        # (K, T, G) prompt positions of every frame slot's visual tokens.
        self.image_positions = torch.tensor(
            [list(range(s.start, s.end)) for s in spans], dtype=torch.long
        ).view(K, T, self.G)
        is_text = torch.ones(self.P, dtype=torch.bool)
        is_text[: self.header_end] = False
        is_text[self.image_positions.reshape(-1)] = False
        self.text_positions = is_text.nonzero()[:, 0]  # (S_text,) ascending, last = P - 1
        self.stats = StreamingStats()
        self.reset()

    def reset(self) -> None:
        """Forget the window: the next tick is a full prefill."""
        self._window: tuple[tuple[FrameKey, ...], ...] | None = None
        self._header: tuple[torch.Tensor, torch.Tensor] | None = None  # (layers, Hkv, h, D) x2
        self._frames: tuple[torch.Tensor, torch.Tensor] | None = None  # (layers, K, T, Hkv, G, D)
        self._reason = "first"

    def bind(self, frames: Sequence[CameraFrame]) -> Callable[..., AnswerState]:
        """The prefill for one tick whose view-major `frames` are given (for `decode`)."""
        keys = [frame_key(f) for f in frames]
        window = tuple(tuple(keys[k * self.T : (k + 1) * self.T]) for k in range(self.K))

        def run(ctx: DecodeContext, embeds: torch.Tensor, mask: torch.Tensor) -> AnswerState:
            return self.prefill(ctx, embeds, mask, window)

        return run

    def classify(self, window: tuple[tuple[FrameKey, ...], ...]) -> tuple[int, str | None]:
        """(frames the window slid by: 0 or 1, the full-prefill reason or None)."""
        old = self._window
        if old is None or self._header is None:
            return 0, self._reason
        if [w[0][0] for w in window] != [w[0][0] for w in old]:
            return 0, "cameras"
        if window == old:
            return 0, None
        newest, before = [w[-1][1] for w in window], [w[-1][1] for w in old]
        if any(n < b for n, b in zip(newest, before, strict=True)):
            return 0, "time_jump"
        if any(n - b > self.max_gap_ns for n, b in zip(newest, before, strict=True)):
            return 0, "gap"
        if all(w[:-1] == o[1:] for w, o in zip(window, old, strict=True)):
            return 1, None
        return 0, "window"

    def prefill(
        self,
        ctx: DecodeContext,
        embeds: torch.Tensor,  # (1, P, W)
        mask: torch.Tensor,  # (P, P) the model's prompt mask (full prefill only)
        window: tuple[tuple[FrameKey, ...], ...],
    ) -> AnswerState:
        self.stats.ticks += 1
        shift, reason = self.classify(window)
        self._window = window
        if reason is not None:
            self.stats.full_prefills[reason] += 1
            self.stats.frames_prefilled += self.K * self.T
            state = full_prefill(ctx, embeds, mask)
            self._harvest(ctx)
            return state
        self.stats.streamed += 1
        return self._stream(ctx, embeds, shift)

    def _harvest(self, ctx: DecodeContext) -> None:
        """Keep the header's and every frame slot's pre-RoPE keys and values from a full
        prefill (cache slots = prompt positions)."""
        cache, h = ctx.cache, self.header_end
        raw, values = cache.raw_keys[:, 0], cache.kv[:, 1, 0]  # (layers, Hkv, L, D) each
        self._header = raw[:, :, :h].clone(), values[:, :, :h].clone()
        pos = self.image_positions.reshape(-1)
        layers, Hkv, _, D = raw.shape
        shape = (layers, Hkv, self.K, self.T, self.G, D)
        frames_k = raw[:, :, pos].reshape(shape).permute(0, 2, 3, 1, 4, 5).contiguous()
        frames_v = values[:, :, pos].reshape(shape).permute(0, 2, 3, 1, 4, 5).contiguous()
        self._frames = frames_k, frames_v  # (layers, K, T, Hkv, G, D) each

    def _stream(self, ctx: DecodeContext, embeds: torch.Tensor, shift: int) -> AnswerState:
        assert self._header is not None and self._frames is not None  # classify checked
        cache, model = ctx.cache, ctx.model
        K, T, G, h = self.K, self.T, self.G, self.header_end
        cache.append(*self._header, torch.arange(h))  # header: same K/V every tick
        frames_k, frames_v = self._frames
        kept = T
        if shift:
            # Every kept frame moves one slot earlier; the new ones enter the tail slots.
            frames_k, frames_v = frames_k.roll(-1, dims=2), frames_v.roll(-1, dims=2)
            new_pos = self.image_positions[:, T - 1].reshape(-1)  # (K*G,)
            new_mask = torch.zeros(K * G, h + K * G, dtype=torch.bool)
            new_mask[:, :h] = self.attend_header
            for k in range(K):  # each new frame sees its own tokens (and the header)
                new_mask[k * G : (k + 1) * G, h + k * G : h + (k + 1) * G] = True
            model(
                inputs_embeds=embeds[:, new_pos], positions=new_pos, mask=new_mask, cache=cache,
                num_logits=0,
            )  # fmt: skip
            ctx.stats.num_forwards += 1
            cache.commit(K * G)
            layers, Hkv, D = frames_k.shape[0], frames_k.shape[3], frames_k.shape[5]
            fresh_k = cache.raw_keys[:, 0, :, h : h + K * G].reshape(layers, Hkv, K, G, D)
            fresh_v = cache.kv[:, 1, 0, :, h : h + K * G].reshape(layers, Hkv, K, G, D)
            frames_k[:, :, T - 1] = fresh_k.permute(0, 2, 1, 3, 4)
            frames_v[:, :, T - 1] = fresh_v.permute(0, 2, 1, 3, 4)
            self._frames = frames_k, frames_v
            self.stats.frames_prefilled += K
            kept = T - 1
        # Kept frames: pre-RoPE keys rotated at their current positions, values as they are.
        layers, _, _, Hkv, _, D = frames_k.shape
        keys = frames_k[:, :, :kept].permute(0, 3, 1, 2, 4, 5).reshape(layers, Hkv, -1, D)
        values = frames_v[:, :, :kept].permute(0, 3, 1, 2, 4, 5).reshape(layers, Hkv, -1, D)
        cache.append(keys, values, self.image_positions[:, :kept].reshape(-1))
        # Text after the header: attends to every slot at an earlier position, and causally
        # among itself (the cache slots are not in prompt order; the mask is by position).
        text = self.text_positions  # (S,)
        past = cache.positions[0, : cache.length]  # (L,)
        text_mask = torch.cat(
            [past[None] <= text[:, None], text[None] <= text[:, None]], dim=1
        )  # (S, L + S)
        logits = model(
            inputs_embeds=embeds[:, text], positions=text, mask=text_mask, cache=cache,
            num_logits=1,
        )  # fmt: skip  # (1, 1, V) predicting the first answer slot
        ctx.stats.num_forwards += 1
        cache.commit(len(text))
        return AnswerState.start(ctx.scaffold, ctx.restrict(logits)[:, -1])
