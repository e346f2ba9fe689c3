"""The SASD objective: 0.5·L_diffusion + 0.5·L_AR with section weights
(docs/ALGORITHMS.md §1, §3).

`SASDModule` wraps a `PlannerModel` for training (and is what DDP wraps): its forward takes a
batch and the noisy copies drawn by `noising`, builds the two-stream sequence
(`streams.two_stream_mask`) and returns the losses. The planner model's own forward is
untouched and pure.

Token shift: answer position a is predicted from the hidden state at a − 1 in its stream
(for the clean stream, a = 0 is predicted by the last prompt token). Each stream's loss is
the section-weighted mean cross-entropy over its targets: every editable position for AR,
the masked positions of both complementary copies for diffusion.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.masks import prompt_mask
from blockplan.model.planner_model import PlannerModel
from blockplan.schema import SECTION_NAMES
from blockplan.train.noising import (
    NoiseLayout,
    apply_mask,
    complementary_masks,
    sample_mask_ratios,
)
from blockplan.train.recipe import Recipe
from blockplan.train.streams import two_stream_mask, two_stream_positions

DIFFUSION_WEIGHT = 0.5
AR_WEIGHT = 0.5
NUM_NOISY = 2  # the noisy copy and its complement


def draw_noise(
    layout: NoiseLayout, answer_ids: np.ndarray, mask_id: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy ids and masks (B, NUM_NOISY, A) for answers (B, A)."""
    ratios = sample_mask_ratios(rng, answer_ids.shape[0])
    masks = np.stack(complementary_masks(layout, ratios, rng), axis=1)  # (B, 2, A)
    return apply_mask(answer_ids[:, None], masks, mask_id), masks


class SASDModule(nn.Module):
    """PlannerModel + the training-only layout and loss."""

    def __init__(self, model: PlannerModel, recipe: Recipe) -> None:
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
        self.register_buffer(
            "positions", two_stream_positions(P, A, NUM_NOISY), persistent=False
        )  # (S,)
        self.register_buffer(
            "weight", torch.tensor(self.layout.weight, dtype=torch.float32), persistent=False
        )  # (A,)
        self.register_buffer(
            "section", torch.from_numpy(self.layout.section), persistent=False
        )  # (A,)
        editable = torch.from_numpy(np.flatnonzero(self.layout.is_editable))
        self.register_buffer("editable", editable, persistent=False)  # (A_e,)

    def prompt_embeds(self, prompt_ids: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
        """(B, P, W) from prompt ids (B, P) and uint8 images (B, K*T, H, W, 3)."""
        m = self.model
        rows = []
        for b in range(prompt_ids.shape[0]):
            visual = m.visual(m.visual.preprocess(images[b]))  # (K*T, G, W)
            rows.append(m.embed_prompt(prompt_ids[b], self.template.image_spans, visual))
        return torch.cat(rows)

    def hidden_states(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        answer_ids: torch.Tensor,  # (B, A)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, n, A)
    ) -> torch.Tensor:
        """Final-norm hidden states (B, S, W) of the two-stream sequence."""
        B = answer_ids.shape[0]
        prompt = self.prompt_embeds(prompt_ids, images)  # (B, P, W)
        answers = torch.cat([answer_ids[:, None], noisy_ids], dim=1).reshape(B, -1)
        embeds = torch.cat([prompt, self.model.embed(answers)], dim=1)  # (B, S, W)
        _, hidden = self.model.decoder(
            inputs_embeds=embeds,
            positions=self.positions,
            mask=self.mask,
            num_logits=0,
            return_hidden=True,
        )
        return hidden

    def forward(
        self,
        prompt_ids: torch.Tensor,  # (B, P)
        answer_ids: torch.Tensor,  # (B, A)
        images: torch.Tensor,  # (B, K*T, H, W, 3) uint8
        noisy_ids: torch.Tensor,  # (B, NUM_NOISY, A)
        noisy_masks: torch.Tensor,  # (B, NUM_NOISY, A) bool
    ) -> dict[str, torch.Tensor]:
        B, P, A = answer_ids.shape[0], self.prompt_len, self.answer_len
        hidden = self.hidden_states(prompt_ids, answer_ids, images, noisy_ids)  # (B, S, W)
        lm_head = self.model.decoder.lm_head
        # AR: editable position a from the clean stream's hidden state at P - 1 + a
        e = self.editable
        ar_logits = lm_head(hidden[:, P - 1 + e])  # (B, A_e, V)
        ar_ce = F.cross_entropy(
            ar_logits.flatten(0, 1).float(), answer_ids[:, e].flatten(), reduction="none"
        )
        ar_w = self.weight[e].repeat(B)  # (B*A_e,)
        ar_sec = self.section[e].repeat(B)
        # diffusion: masked position a of copy c from that copy's hidden state at a - 1
        diff_ce, diff_w, diff_sec = [], [], []
        for c in range(noisy_ids.shape[1]):
            start = P + (1 + c) * A
            shifted = hidden[:, start - 1 : start - 1 + A]  # (B, A, W): row a predicts a
            m = noisy_masks[:, c]  # (B, A)
            logits = lm_head(shifted[m])  # (M, V)
            diff_ce.append(F.cross_entropy(logits.float(), answer_ids[m], reduction="none"))
            diff_w.append(self.weight.expand(B, A)[m])
            diff_sec.append(self.section.expand(B, A)[m])
        diff_ce, diff_w, diff_sec = torch.cat(diff_ce), torch.cat(diff_w), torch.cat(diff_sec)
        ar_loss = (ar_ce * ar_w).sum() / ar_w.sum()
        diff_loss = (diff_ce * diff_w).sum() / diff_w.sum().clamp_min(1e-6)
        out = {
            "loss": DIFFUSION_WEIGHT * diff_loss + AR_WEIGHT * ar_loss,
            "ar": ar_loss.detach(),
            "diffusion": diff_loss.detach(),
        }
        for k, name in enumerate(SECTION_NAMES):
            out[f"ar/{name}"] = _mean_where(ar_ce, ar_sec == k)
            out[f"diffusion/{name}"] = _mean_where(diff_ce, diff_sec == k)
        return out


def _mean_where(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    n = where.sum()
    return (values.detach() * where).sum() / n.clamp_min(1)
