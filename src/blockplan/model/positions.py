"""Rotary positions of a prompt whose positions are not simply 0..P-1 (multimodal RoPE)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PromptPositions:
    """Rotary positions of a prompt whose positions are not simply 0..P-1.

    prompt: (P,) or, for multimodal RoPE (Qwen2.5-VL), (3, P) t/h/w positions.
    answer_start: the position of answer slot 0; answer slot a sits at answer_start + a (the
    same on all three axes: text tokens under mRoPE are plain RoPE).
    """

    prompt: torch.Tensor
    answer_start: int

    def for_prompt(self) -> torch.Tensor:
        """(P,) or (3, 1, P): what the decoder's forward takes for one row."""
        return self.prompt[:, None] if self.prompt.dim() == 2 else self.prompt

    def with_answer(self, num_answer: int) -> torch.Tensor:
        """(P + A,) or (3, 1, P + A): the prompt followed by `num_answer` answer slots."""
        answer = torch.arange(self.answer_start, self.answer_start + num_answer)
        if self.prompt.dim() == 1:
            return torch.cat([self.prompt, answer])
        return torch.cat([self.prompt, answer.expand(3, num_answer)], dim=1)[:, None]
