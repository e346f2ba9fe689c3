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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.masks import block_causal_mask, prompt_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.train.robot_examples import RobotRecipe

ATTENTIONS = ("bidirectional", "block_causal")


class ChunkDiffusionModule(nn.Module):
    """A `PlannerModel` with one of the two chunk attentions, for training."""

    def __init__(self, model: PlannerModel, recipe: RobotRecipe, attention: str) -> None:
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
        self.register_buffer("positions", torch.arange(P + A), persistent=False)

    def prompt_embeds(self, prompt_ids: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        """(B, P, W) from prompt ids (B, P) and uint8 images (B, K*T, H, W, 3)."""
        m = self.model
        rows = []
        for b in range(prompt_ids.shape[0]):
            visual = m.visual(m.visual.preprocess(images[b]))  # (K*T, G, W)
            rows.append(m.embed_prompt(prompt_ids[b], self.template.image_spans, visual))
        return torch.cat(rows)

    def masked_logits(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, A)
        masks: torch.Tensor,  # (B, A) bool
    ) -> torch.Tensor:
        """Logits (M, V) at the M masked positions, in (sample, position) order."""
        P, A = self.prompt_len, self.answer_len
        embeds = torch.cat([self.prompt_embeds(prompt_ids, images), self.model.embed(noisy_ids)], 1)
        _, hidden = self.model.decoder(
            inputs_embeds=embeds,
            positions=self.positions,
            mask=self.mask,
            num_logits=0,
            return_hidden=True,
        )  # (B, P + A, W)
        shifted = hidden[:, P - 1 : P - 1 + A]  # row a predicts chunk position a
        return self.model.decoder.lm_head(shifted[masks]).float()  # (M, V)

    def diffusion_loss(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The plain masked-diffusion loss: mean cross-entropy at the masked positions."""
        logits = self.masked_logits(
            batch["prompt_ids"], batch["images"], batch["noisy_ids"], batch["masks"]
        )
        targets = batch["answer_ids"][batch["masks"]]
        ce = F.cross_entropy(logits, targets)
        accuracy = (logits.argmax(-1) == targets).float().mean()
        return {"loss": ce, "ce": ce.detach(), "accuracy": accuracy.detach()}

    def distillation_loss(
        self, batch: dict[str, torch.Tensor], teacher: ChunkDiffusionModule
    ) -> dict[str, torch.Tensor]:
        """Mean KL(teacher ‖ self) at the masked positions of the same noisy chunk."""
        args = (batch["prompt_ids"], batch["images"], batch["noisy_ids"], batch["masks"])
        with torch.no_grad():
            target = F.log_softmax(teacher.masked_logits(*args), dim=-1)  # (M, V)
        logits = self.masked_logits(*args)
        log_p = F.log_softmax(logits, dim=-1)
        kl = F.kl_div(log_p, target, log_target=True, reduction="batchmean")
        answer = batch["answer_ids"][batch["masks"]]
        with torch.no_grad():
            ce = F.cross_entropy(logits, answer)
            accuracy = (logits.argmax(-1) == answer).float().mean()
        return {"loss": kl, "kl": kl.detach(), "ce": ce, "accuracy": accuracy}
