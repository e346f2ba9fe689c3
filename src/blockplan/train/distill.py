"""The robot objectives (docs/ALGORITHMS.md §8): a bidirectional teacher trained with the plain
masked-diffusion loss, then a block-causal student trained by asymmetric distillation.

One sequence per sample: the prompt, then the noisy chunk at rotary positions P + a. The
attention over the chunk is what differs:

* teacher: bidirectional over the whole chunk (one block) — the `full_diffusion` forward;
* student: block-causal — a block sees the prompt, the earlier blocks (noisy as they are:
  diffusion forcing) and itself bidirectionally — the forward the `pipelined` strategy runs,
  and, with clean earlier blocks, what `section_diffusion` runs against the cache.

Token shift: chunk position a is predicted from the hidden state at P − 1 + a. The teacher's
loss is the mean cross-entropy at the masked positions. The student's is the mean
KL(p_teacher ‖ p_student) at the masked positions, the teacher (frozen) seeing the same noisy
chunk with its wider context: "asymmetric" is the context, not the noise.

Scene targets (`scene_probe`): the object's, the goal's and the hand's positions (the data
set's `scene`, simulator ground truth) in units of `SCENE_SCALE` around `SCENE_CENTRE`. A
model with a scene token (model/vision.py, docs/ALGORITHMS.md §8.3) regresses them with its
own scene head, from every camera's newest frame, and reads them back as a token; a model
without one gets a training-only `TokenProbe` (train/probe.py) on the newest frame's visual
tokens, so the tokens must show where things are (§8.2). The loss comes back as `scene` next
to `loss`; the trainer weighs it in.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.masks import block_causal_mask, prompt_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.model.tiles import AttentionTiles
from blockplan.train.probe import TokenProbe, probe_loss
from blockplan.train.robot_examples import RobotRecipe

ATTENTIONS = ("bidirectional", "block_causal")
# Meta-World's table: object, goal and hand positions lie within ~0.2 m of this point
# (world, m); the order is the data set's `scene` (object, goal, hand)
SCENE_CENTRE = (0.0, 0.75, 0.1) * 3
SCENE_SCALE = (0.1,) * 9


class ChunkDiffusionModule(nn.Module):
    """A `PlannerModel` with one of the two chunk attentions, for training."""

    def __init__(
        self, model: PlannerModel, recipe: RobotRecipe, attention: str, scene_probe: bool = False
    ) -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention={attention!r}: must be one of {list(ATTENTIONS)}")
        self.model, self.attention = model, attention
        self.template = recipe.template
        scaffold = recipe.scaffold
        P, A = len(self.template), len(scaffold)
        self.prompt_len, self.answer_len = P, A
        blocks = (
            [(0, A)]
            if attention == "bidirectional"
            else [(b.start, b.end) for b in scaffold.blocks]
        )
        prompt = prompt_mask(self.template, model.config.visual_attention)  # as the planner
        self.register_buffer("mask", block_causal_mask(prompt, blocks), persistent=False)
        self.tiles = AttentionTiles(self.mask)  # the same mask, attended tile by tile
        self.register_buffer("positions", torch.arange(P + A), persistent=False)
        # the model's own scene head, or a training-only probe; None: no scene loss
        self.scene_token = bool(model.config.vision.scene)
        if self.scene_token and model.config.vision.scene != len(SCENE_SCALE):
            raise ValueError(
                f"vision.scene={model.config.vision.scene}: the scene targets are "
                f"{len(SCENE_SCALE)} numbers (object, goal, hand xyz)"
            )
        self.scene_head = (
            TokenProbe(model.config, SCENE_CENTRE, SCENE_SCALE)
            if scene_probe and not self.scene_token
            else None
        )
        self.scene_loss_on = scene_probe
        frames = model.config.num_frames
        newest = [k * frames + frames - 1 for k in range(len(model.config.camera_names))]
        self.register_buffer("newest", torch.tensor(newest), persistent=False)
        self.register_buffer("centre", torch.tensor(SCENE_CENTRE), persistent=False)
        self.register_buffer("scale", torch.tensor(SCENE_SCALE), persistent=False)

    def prompt_embeds(
        self,
        prompt_ids: torch.Tensor,
        images: torch.Tensor,
        visual_out: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(B, P, W) from prompt ids (B, P) and uint8 images (B, K*T, H, W, 3);
        `visual_out` collects each sample's visual tokens (K*T, G, W), or with a scene token
        its scene head's numbers (K*T, n)."""
        m = self.model
        rows = []
        for b in range(prompt_ids.shape[0]):
            pixels = m.visual.preprocess(images[b])
            if self.scene_token and visual_out is not None:
                visual = m.visual(pixels, scene_out=visual_out)  # (K*T, G, W)
            else:
                visual = m.visual(pixels)
                if visual_out is not None:
                    visual_out.append(visual)
            rows.append(m.embed_prompt(prompt_ids[b], self.template.image_spans, visual))
        return torch.cat(rows)

    def masked_logits(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, A)
        masks: torch.Tensor,  # (B, A) bool
        visual_out: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Logits (M, V) at the M masked positions, in (sample, position) order."""
        P, A = self.prompt_len, self.answer_len
        prompt = self.prompt_embeds(prompt_ids, images, visual_out)
        embeds = torch.cat([prompt, self.model.embed(noisy_ids)], 1)
        _, hidden = self.model.decoder(
            inputs_embeds=embeds,
            positions=self.positions,
            mask=self.tiles,
            num_logits=0,
            return_hidden=True,
        )  # (B, P + A, W)
        shifted = hidden[:, P - 1 : P - 1 + A]  # row a predicts chunk position a
        return self.model.decoder.lm_head(shifted[masks]).float()  # (M, V)

    def diffusion_loss(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The plain masked-diffusion loss: mean cross-entropy at the masked positions."""
        visual = [] if self.scene_loss_on else None
        logits = self.masked_logits(
            batch["prompt_ids"], batch["images"], batch["noisy_ids"], batch["masks"], visual
        )
        targets = batch["answer_ids"][batch["masks"]]
        ce = F.cross_entropy(logits, targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        out = {"loss": ce, "ce": ce.detach(), "accuracy": accuracy.detach()}
        return out | self._scene_loss(visual, batch)

    def _scene_loss(
        self, visual: list[torch.Tensor] | None, batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        if not self.scene_loss_on:
            return {}
        if "scene" not in batch:
            raise ValueError("the scene loss trains on the batch's scene")
        if self.scene_head is not None:
            return {"scene": self.scene_head.loss(torch.stack(visual), batch["scene"])}
        predicted = torch.stack(visual)[:, self.newest].float()  # (B, K, n)
        target = (batch["scene"].float() - self.centre) / self.scale  # (B, n)
        return {"scene": probe_loss(predicted, target[:, None].expand_as(predicted))}

    def distillation_loss(
        self, batch: dict[str, torch.Tensor], teacher: ChunkDiffusionModule
    ) -> dict[str, torch.Tensor]:
        """Mean KL(teacher ‖ self) at the masked positions of the same noisy chunk."""
        args = (batch["prompt_ids"], batch["images"], batch["noisy_ids"], batch["masks"])
        with torch.no_grad():
            target = F.log_softmax(teacher.masked_logits(*args), dim=-1)  # (M, V)
        visual = [] if self.scene_loss_on else None
        logits = self.masked_logits(*args, visual)
        log_p = F.log_softmax(logits, dim=-1)
        kl = F.kl_div(log_p, target, log_target=True, reduction="batchmean")
        answer = batch["answer_ids"][batch["masks"]]
        with torch.no_grad():
            ce = F.cross_entropy(logits, answer)
            accuracy = (logits.argmax(-1) == answer).float().mean()
        out = {"loss": kl, "kl": kl.detach(), "ce": ce, "accuracy": accuracy}
        return out | self._scene_loss(visual, batch)
