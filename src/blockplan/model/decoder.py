"""A Qwen2-architecture causal LM whose state dict is identical to HF `Qwen2ForCausalLM`.

`forward` is pure: the caller hands it tokens (ids or embeddings), their positions, an
explicit attention mask and optionally a KV store to write into. With ids alone it is a
plain causal LM forward: `model(input_ids)` returns logits (B, S, V).
"""

from __future__ import annotations

import torch
from torch import nn

from blockplan.model.config import DecoderConfig
from blockplan.model.fast import FastForward
from blockplan.model.layers import DecoderLayer, KVStore, RMSNorm, rope_cos_sin
from blockplan.model.masks import causal_mask
from blockplan.model.tiles import AttentionTiles


class DecoderBody(nn.Module):
    """HF's `Qwen2Model`: embeddings, layers, final norm (state-dict prefix `model.`)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Decoder(nn.Module):
    """Qwen2 / Qwen2.5 decoder with LM head (tied to the embeddings when the config says).

    Without autograd the forward runs `model/fast.py` (fused projections, RoPE table, no
    module calls; the same values bit for bit); `fast_path = False` keeps the module-by-module
    reference forward, which training (autograd) always uses.
    """

    fast_path: bool = True

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderBody(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.fast = FastForward(config)

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.config

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, S, W) of ids (B, S)."""
        return self.model.embed_tokens(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,  # (B, S)
        *,
        inputs_embeds: torch.Tensor | None = None,  # (B, S, W)
        positions: torch.Tensor | None = None,  # (B, S) or (S,) int; mRoPE: (3, B, S)
        mask: torch.Tensor
        | AttentionTiles
        | None = None,  # (S, L) or (B, S, L) bool, True = may attend
        cache: KVStore | None = None,
        num_logits: int | None = None,
        return_hidden: bool = False,
        logit_rows: torch.Tensor | None = None,  # (R,) int: which new tokens get logits
        hidden_layers: tuple[int, ...] | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, S', V) for the last S' = num_logits (default all S) new tokens, or for
        the R new tokens `logit_rows` (ascending indices into the S; the LM head runs on
        those rows only), and the final-norm hidden states (B, S, W) too when
        `return_hidden`. `hidden_layers`: instead of the final-norm hidden states, the
        residual stream after each of these layers, concatenated, (B, S, len · W) — what a
        DFlash drafter reads (decoding/dflash.py); the logits are the same either way.

        L counts the key slots: the committed slots of `cache` followed by the S new tokens
        (just S without a cache). Defaults: positions continue after the cache, causal mask.
        A fixed mask planned as `AttentionTiles` (model/tiles.py) is attended tile by tile
        under autograd (training), densely otherwise.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Decoder.forward: pass exactly one of input_ids, inputs_embeds")
        if num_logits is not None and logit_rows is not None:
            raise ValueError("Decoder.forward: pass at most one of num_logits, logit_rows")
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # (B, S, W)
        B, S, _ = x.shape
        past = getattr(cache, "length", 0) if cache is not None else 0
        if positions is None:
            positions = torch.arange(past, past + S, device=x.device)
        if positions.dim() == 3:  # (3, B|1, S) multimodal positions
            positions = positions.expand(3, B, S)
            flat = positions[0]  # (B, S) what the cache records (exact for text tokens)
        else:
            positions = positions.expand(B, S) if positions.dim() == 1 else positions  # (B, S)
            flat = positions
        fast = self.fast_path and not torch.is_grad_enabled()
        tiles = None
        if isinstance(mask, AttentionTiles):
            tiles, mask = (None, mask.mask.to(x.device)) if fast else (mask, None)
        if tiles is not None:
            bias = tiles
        else:
            if mask is None:
                mask = causal_mask(S, past, device=x.device)
            mask = mask[None, None] if mask.dim() == 2 else mask[:, None]  # (B|1, 1, S, L)
            # Additive form once per forward (not once per layer); an all-True mask is no mask.
            bias = (
                None if bool(mask.all()) else x.new_zeros(mask.shape).masked_fill(~mask, -torch.inf)
            )
        if cache is not None:
            cache.write_positions(flat)
        if fast:
            rows = slice(None) if num_logits is None else slice(S - num_logits, None)
            rows = rows if logit_rows is None else logit_rows
            logits, hidden = self.fast(self, x, positions, bias, cache, rows, hidden_layers)
            return (logits, hidden) if return_hidden or hidden_layers is not None else logits
        c = self.config
        rope = rope_cos_sin(positions, c.dim_per_head, c.rope_theta, x.dtype, c.mrope_section)
        taps = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, rope, bias, cache)  # (B, S, W)
            if hidden_layers is not None and i in hidden_layers:
                taps.append(x)
        hidden = self.model.norm(x)  # (B, S, W)
        kept = hidden if num_logits is None else hidden[:, S - num_logits :]
        kept = kept if logit_rows is None else hidden[:, logit_rows]
        logits = self.lm_head(kept)  # (B, S', V)
        if hidden_layers is not None:
            return logits, torch.cat(taps, dim=-1)
        return (logits, hidden) if return_hidden else logits

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
