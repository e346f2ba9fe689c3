"""The SASD objective: 0.5·L_diffusion + 0.5·L_AR with section weights
(docs/ALGORITHMS.md §1, §3); with a flow trajectory head (§7.1), the SASD loss of the text
sections plus `FLOW_WEIGHT` × the rectified-flow loss of the head, which reads the clean
stream's K/V of the prompt and the reasoning sections (what the KV cache holds at serving).

`SASDModule` wraps a `PlannerModel` for training (and is what DDP wraps): its forward takes a
batch and the noisy copies drawn by `noising`, builds the two-stream sequence
(`streams.two_stream_mask`) and returns the losses. The planner model's own forward is
untouched and pure.

Token shift: answer position a is predicted from the hidden state at a − 1 in its stream
(for the clean stream, a = 0 is predicted by the last prompt token). Each stream's loss is
the section-weighted mean cross-entropy over its targets: every editable position for AR,
the masked positions of both complementary copies for diffusion. A sample's unknown
sections (`known_sections`, e.g. the critical objects and explanation of a sample from a
recorded bag, replay/dataset.py) weigh nothing: their tokens are context, never targets.

Lane-pose probe (training only, `lane_probe`): a `TokenProbe` (train/probe.py) on the
newest frame's visual tokens regresses the ego's pose in its lane (left-positive offset,
heading error; `EpisodeLog.lane_pose`) in units of `LANE_POSE_SCALE`, so the tokens the
decoder reads must carry the offset, which the 2 × 3 pooling otherwise discards
(docs/ALGORITHMS.md §3.2). Lead probe (`lead_probe`): the same kind of head regresses the
gap to the nearest car ahead in the ego's lane (`lead_targets`), which the pooling also
loses: a car 50 m ahead and one 140 m ahead fall into the same cell (§3.4). The heads are
not part of the model folder; the trainer keeps them (`probes`) in its checkpoint. A model
with a scene token (`vision.scene`, §3.5) learns the same targets with its tower's scene
head instead, from the front camera's newest frame; that head is part of the model.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.flow_head import NUM_WAYPOINTS, KVRecorder
from blockplan.model.masks import prompt_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.model.tiles import AttentionTiles
from blockplan.schema import SECTION_NAMES
from blockplan.train.noising import (
    NoiseLayout,
    apply_mask,
    complementary_masks,
    sample_mask_ratios,
)
from blockplan.train.probe import LEAD_SCALE, LEAD_TARGETS, TokenProbe, lead_targets, probe_loss
from blockplan.train.recipe import Recipe
from blockplan.train.streams import two_stream_mask, two_stream_positions

DIFFUSION_WEIGHT = 0.5
AR_WEIGHT = 0.5
NUM_NOISY = 2  # the noisy copy and its complement
FLOW_WEIGHT = 1.0  # the rectified-flow loss next to the SASD loss (flow head only)
FLOW_SAMPLES = 4  # (noise, τ) draws per example and step: the head is cheap next to the decoder
WAYPOINT_STRIDE = 4  # future_xy is 4 Hz from 0.25 s: the waypoints (1..5 s) are every 4th
LANE_POSE_SCALE = (0.25, 0.15)  # metres, radians: the lane-pose probe's targets in these units


def draw_flow_noise(batch_size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x0 (FLOW_SAMPLES·B, 5, 2) standard normal and τ (FLOW_SAMPLES·B,) uniform in [0, 1)."""
    n = FLOW_SAMPLES * batch_size
    x0 = rng.standard_normal((n, NUM_WAYPOINTS, 2)).astype(np.float32)
    return x0, rng.random(n).astype(np.float32)


def draw_noise(
    layout: NoiseLayout, answer_ids: np.ndarray, mask_id: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy ids and masks (B, NUM_NOISY, A) for answers (B, A)."""
    ratios = sample_mask_ratios(rng, answer_ids.shape[0])
    masks = np.stack(complementary_masks(layout, ratios, rng), axis=1)  # (B, 2, A)
    return apply_mask(answer_ids[:, None], masks, mask_id), masks


class SASDModule(nn.Module):
    """PlannerModel + the training-only layout and loss."""

    def __init__(
        self,
        model: PlannerModel,
        recipe: Recipe,
        lane_probe: bool = False,
        lead_probe: bool = False,
    ) -> None:
        super().__init__()
        self.model = model
        self.template = recipe.template
        scaffold = recipe.scaffold
        self.layout = NoiseLayout.from_scaffold(scaffold)
        self.mask_id = scaffold.mask_id
        P, A = len(self.template), len(scaffold)
        self.prompt_len, self.answer_len = P, A
        # The planner prefills with the same mask (model/masks.py prompt_mask).
        prompt = prompt_mask(self.template, model.config.visual_attention)  # (P, P)
        mask = two_stream_mask(prompt, scaffold.blocks, NUM_NOISY)
        self.register_buffer("mask", mask, persistent=False)  # (S, S)
        self.tiles = AttentionTiles(mask)  # the same mask, attended tile by tile
        self.register_buffer(
            "positions", two_stream_positions(P, A, NUM_NOISY), persistent=False
        )  # (S,)
        weight = torch.tensor(self.layout.weight, dtype=torch.float32)  # (A,)
        self.flow_head = model.flow_head
        if self.flow_head is not None:
            # The digit tokens of the trajectory are not decoded: only the text sections learn.
            trajectory = scaffold.section("trajectory")
            weight[trajectory.start : trajectory.end] = 0.0
            self.prefix_len = P + trajectory.start  # the K/V the head reads
            self.read_layers = self.flow_head.layer_indices
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer(
            "section", torch.from_numpy(self.layout.section), persistent=False
        )  # (A,)
        editable = torch.from_numpy(np.flatnonzero(self.layout.is_editable))
        self.register_buffer("editable", editable, persistent=False)  # (A_e,)
        # training-only heads on the visual tokens, by the name of the loss they add
        self.probes = nn.ModuleDict()
        if lane_probe:
            self.probes["lane_pose"] = TokenProbe(model.config, (0.0, 0.0), LANE_POSE_SCALE)
        # With a scene token the tower's scene head learns the lead targets (the front
        # camera's newest frame) and feeds them to the decoder; else a training-only probe.
        self.lead_scene = lead_probe and bool(model.config.vision.scene)
        if self.lead_scene:
            if model.config.vision.scene != LEAD_TARGETS:
                raise ValueError(
                    f"vision.scene={model.config.vision.scene}: a driving model's scene token "
                    f"says the {LEAD_TARGETS} lead targets"
                )
            if "front" not in model.config.camera_names:
                raise ValueError("the scene token learns the lead car from a camera `front`")
            front = model.config.camera_names.index("front")
            self.front_newest = front * model.config.num_frames + model.config.num_frames - 1
            scale = torch.tensor(LEAD_SCALE, dtype=torch.float32)
            self.register_buffer("lead_scale", scale, persistent=False)
        elif lead_probe:
            self.probes["lead"] = TokenProbe(model.config, (0.0, 0.0), LEAD_SCALE)

    @property
    def lane_head(self) -> TokenProbe | None:
        return dict(self.probes.items()).get("lane_pose")

    @property
    def lead_head(self) -> TokenProbe | None:
        return dict(self.probes.items()).get("lead")

    def prompt_embeds(
        self,
        prompt_ids: torch.Tensor,
        images: torch.Tensor,
        ego_history: torch.Tensor | None = None,
        visual_out: list[torch.Tensor] | None = None,
        lane_input: torch.Tensor | None = None,
        scene_out: list[torch.Tensor] | None = None,
        scene_given: torch.Tensor | None = None,
        lead_input: torch.Tensor | None = None,
        beside_input: torch.Tensor | None = None,
        route_input: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B, P, W) from prompt ids (B, P), uint8 images (B, K*T, H, W, 3) and, for a model
        with a numeric ego encoder, the ego history (B, num_history, 6) it encodes (and the
        (B, 2) lane pose, NaN: unknown, the (B, 2) car ahead, the (B, 2, 5) lanes beside and
        the (B, A, 2) route ahead, for an encoder that reads them); `visual_out` collects
        each sample's visual tokens (K*T, G, W), `scene_out` the scene head's numbers
        (K*T, n) of a model with a scene token; `scene_given` (B, K*T, n) the numbers its
        scene token says instead, where not NaN (teacher forcing)."""
        m = self.model
        span = self.template.ego_span
        if span is not None and ego_history is None:
            raise ValueError("a model with an ego encoder trains on the ego history")
        rows = []
        for b in range(prompt_ids.shape[0]):
            given = None if scene_given is None else scene_given[b]
            visual = m.visual(m.visual.preprocess(images[b]), scene_out, given)  # (K*T, G, W)
            if visual_out is not None:
                visual_out.append(visual)
            ego = {} if span is None else {"ego_span": span, "ego_history": ego_history[b]}
            if span is not None and lane_input is not None:
                ego["lane_pose"] = lane_input[b]
            if span is not None and lead_input is not None:
                ego["lead"] = lead_input[b]
            if span is not None and beside_input is not None:
                ego["beside"] = beside_input[b]
            if span is not None and route_input is not None:
                ego["route_ahead"] = route_input[b]
            rows.append(m.embed_prompt(prompt_ids[b], self.template.image_spans, visual, **ego))
        return torch.cat(rows)

    def hidden_states(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        answer_ids: torch.Tensor,  # (B, A)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, n, A)
        recorder: KVRecorder | None = None,
        ego_history: torch.Tensor | None = None,  # (B, num_history, 6)
        visual_out: list[torch.Tensor] | None = None,
        lane_input: torch.Tensor | None = None,  # (B, 2) the encoder's lane pose
        scene_out: list[torch.Tensor] | None = None,
        scene_given: torch.Tensor | None = None,
        lead_input: torch.Tensor | None = None,  # (B, 2) the encoder's car ahead
        beside_input: torch.Tensor | None = None,  # (B, 2, 5) the encoder's lanes beside
        route_input: torch.Tensor | None = None,  # (B, A, 2) the encoder's route ahead
    ) -> torch.Tensor:
        """Final-norm hidden states (B, S, W) of the two-stream sequence; `recorder` keeps
        the K/V of some layers, `visual_out` collects the visual tokens, `scene_out` the
        scene head's numbers, `scene_given` what the scene token says instead."""
        B = answer_ids.shape[0]
        prompt = self.prompt_embeds(
            prompt_ids,
            images,
            ego_history,
            visual_out,
            lane_input,
            scene_out,
            scene_given,
            lead_input,
            beside_input,
            route_input,
        )
        answers = torch.cat([answer_ids[:, None], noisy_ids], dim=1).reshape(B, -1)
        embeds = torch.cat([prompt, self.model.embed(answers)], dim=1)  # (B, S, W)
        _, hidden = self.model.decoder(
            inputs_embeds=embeds,
            positions=self.positions,
            mask=self.tiles,
            num_logits=0,
            return_hidden=True,
            cache=recorder,
        )
        return hidden

    def forward(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        answer_ids: torch.Tensor,  # (B, A)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, NUM_NOISY, A)
        noisy_masks: torch.Tensor,  # (B, NUM_NOISY, A) bool
        future_xy: torch.Tensor | None = None,  # (B, 20, 2) the flow head's targets
        flow_noise: torch.Tensor | None = None,  # (FLOW_SAMPLES·B, 5, 2)
        flow_tau: torch.Tensor | None = None,  # (FLOW_SAMPLES·B,)
        ego_history: torch.Tensor | None = None,  # (B, num_history, 6) the ego encoder's input
        lane_pose: torch.Tensor | None = None,  # (B, 2) the probe's targets, NaN: none
        lane_input: torch.Tensor | None = None,  # (B, 2) the ego encoder's lane pose
        lead: torch.Tensor | None = None,  # (B, 2) lead gap (inf: none, NaN: unknown), speed
        lead_told: torch.Tensor | None = None,  # (B,) bool: the scene token says the true gap
        lead_input: torch.Tensor | None = None,  # (B, 2) the ego encoder's car ahead
        beside_input: torch.Tensor | None = None,  # (B, 2, 5) the ego encoder's lanes beside
        route_input: torch.Tensor | None = None,  # (B, A, 2) the ego encoder's route ahead
        known_sections: torch.Tensor | None = None,  # (B, num_sections) bool; None: all known
    ) -> dict[str, torch.Tensor]:
        B, P, A = answer_ids.shape[0], self.prompt_len, self.answer_len
        # (B, A) per-sample CE weights: an unknown section's tokens weigh nothing
        weight = self.weight.expand(B, A)
        known = None
        if known_sections is not None:
            known = known_sections.to(torch.bool)[:, self.section]  # (B, A)
            weight = weight * known
        recorder = KVRecorder(self.read_layers) if self.flow_head is not None else None
        visual: list[torch.Tensor] | None = [] if len(self.probes) else None
        scene: list[torch.Tensor] | None = [] if self.lead_scene else None
        given = self.told_scene(lead, lead_told) if lead_told is not None else None
        hidden = self.hidden_states(
            prompt_ids,
            answer_ids,
            images,
            noisy_ids,
            recorder,
            ego_history,
            visual,
            lane_input,
            scene,
            given,
            lead_input,
            beside_input,
            route_input,
        )  # (B, S, W)
        lm_head = self.model.decoder.lm_head
        # AR: editable position a from the clean stream's hidden state at P - 1 + a
        e = self.editable
        ar_logits = lm_head(hidden[:, P - 1 + e])  # (B, A_e, V)
        ar_ce = F.cross_entropy(
            ar_logits.flatten(0, 1).float(), answer_ids[:, e].flatten(), reduction="none"
        )
        ar_w = weight[:, e].flatten()  # (B*A_e,)
        ar_sec = self.section[e].repeat(B)
        ar_known = None if known is None else known[:, e].flatten()
        # diffusion: masked position a of copy c from that copy's hidden state at a - 1
        diff_ce, diff_w, diff_sec, diff_known = [], [], [], []
        for c in range(noisy_ids.shape[1]):
            start = P + (1 + c) * A
            shifted = hidden[:, start - 1 : start - 1 + A]  # (B, A, W): row a predicts a
            m = noisy_masks[:, c]  # (B, A)
            logits = lm_head(shifted[m])  # (M, V)
            diff_ce.append(F.cross_entropy(logits.float(), answer_ids[m], reduction="none"))
            diff_w.append(weight[m])
            diff_sec.append(self.section.expand(B, A)[m])
            if known is not None:
                diff_known.append(known[m])
        diff_ce, diff_w, diff_sec = torch.cat(diff_ce), torch.cat(diff_w), torch.cat(diff_sec)
        ar_loss = (ar_ce * ar_w).sum() / ar_w.sum().clamp_min(1e-6)
        diff_loss = (diff_ce * diff_w).sum() / diff_w.sum().clamp_min(1e-6)
        out = {
            "loss": DIFFUSION_WEIGHT * diff_loss + AR_WEIGHT * ar_loss,
            "ar": ar_loss.detach(),
            "diffusion": diff_loss.detach(),
        }
        if self.flow_head is not None:
            if future_xy is None or flow_noise is None or flow_tau is None:
                raise ValueError("a flow-head model trains on future_xy, flow_noise, flow_tau")
            keys, values = recorder.prefix(self.prefix_len)  # (R, B, Hkv, L, D)
            waypoints = future_xy[:, WAYPOINT_STRIDE - 1 :: WAYPOINT_STRIDE].to(hidden.dtype)
            flow = self.flow_loss(waypoints, keys, values, flow_noise, flow_tau)
            out["loss"] = out["loss"] + FLOW_WEIGHT * flow
            out["flow"] = flow.detach()
        if self.lane_head is not None:
            if lane_pose is None:
                raise ValueError("the lane-pose probe trains on lane_pose")
            out["lane_pose"] = self.lane_head.loss(torch.stack(visual), lane_pose)
        if self.lead_head is not None:
            if lead is None:
                raise ValueError("the lead probe trains on lead")
            out["lead"] = self.lead_head.loss(torch.stack(visual), lead_targets(lead))
        if self.lead_scene:
            if lead is None:
                raise ValueError("the scene token learns the lead targets from lead")
            said = torch.stack(scene)[:, self.front_newest].float()  # (B, n) in units
            out["lead"] = probe_loss(said, lead_targets(lead) / self.lead_scale)
        if known is not None:  # the per-section means over the known tokens only
            ar_sec = torch.where(ar_known, ar_sec, -1)
            diff_sec = torch.where(torch.cat(diff_known), diff_sec, -1)
        for k, name in enumerate(SECTION_NAMES):
            out[f"ar/{name}"] = _mean_where(ar_ce, ar_sec == k)
            out[f"diffusion/{name}"] = _mean_where(diff_ce, diff_sec == k)
        return out

    def told_scene(self, lead: torch.Tensor | None, told: torch.Tensor) -> torch.Tensor:
        """(B, K*T, n) what the scene tokens say under teacher forcing: the true lead targets
        (in the head's units) at the front camera's newest frame of the `told` (B,) samples
        whose gap is known; NaN (the head's own numbers) everywhere else."""
        if not self.lead_scene or lead is None:
            raise ValueError("teacher forcing of the scene token needs a scene token and lead")
        m = self.model.config
        B, n = lead.shape[0], m.vision.scene
        shape = (B, len(m.camera_names) * m.num_frames, n)
        given = torch.full(shape, float("nan"), device=lead.device)
        truth = lead_targets(lead) / self.lead_scale  # (B, n), NaN where unknown
        given[:, self.front_newest] = torch.where(told[:, None], truth, given[:, self.front_newest])
        return given

    def flow_loss(
        self,
        waypoints: torch.Tensor,  # (B, 5, 2) metres
        keys: torch.Tensor,  # (R, B, Hkv, L, D)
        values: torch.Tensor,
        x0: torch.Tensor,  # (n·B, 5, 2)
        tau: torch.Tensor,  # (n·B,)
    ) -> torch.Tensor:
        """Rectified flow: the head's velocity at x_τ = (1 - τ)·x0 + τ·x1 against x1 - x0
        (x1: the normalised waypoints), mean squared error; each example n times."""
        head = self.flow_head
        n = x0.shape[0] // waypoints.shape[0]
        x1 = head.normalise(waypoints).repeat(n, 1, 1)  # (n·B, 5, 2)
        x0, tau = x0.to(x1.dtype), tau.to(x1.dtype)
        xt = (1 - tau[:, None, None]) * x0 + tau[:, None, None] * x1
        v = head(xt, tau, keys.repeat(1, n, 1, 1, 1), values.repeat(1, n, 1, 1, 1))
        return F.mse_loss(v.float(), (x1 - x0).float())


def _mean_where(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    n = where.sum()
    return (values.detach() * where).sum() / n.clamp_min(1)
