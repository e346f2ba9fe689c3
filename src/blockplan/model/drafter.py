"""The DFlash drafter: a small block-diffusion network that proposes a whole window of answer
tokens in one forward, conditioned on hidden states of its target (docs/ALGORITHMS.md §4.7).

Inputs per window [w, e): the *context*, the target's residual stream after
`target_layers` at the C answer (or prompt) positions before w, concatenated and projected
to the drafter's width, and the window's tokens, embedded with the target's own embedding
table, a learned mask vector at the slots still to be drafted. One or two decoder layers
attend bidirectionally over context and window; the window's rows go back to the target's
width and are scored by the rows of the target's LM head for the ids in `vocab` (the
tokens the target's answers use: a narrow head). Row i predicts slot w + i itself.

The target's embedding and head are not copied into the drafter's folder: `bind` takes
them from the target, after checking `target_sha256` (the target's decoder weights) and
the shapes.

Folder (`save_drafter` / `load_drafter`): config.json (`model_type: blockplan_drafter`),
model.safetensors and manifest.json over both, required and verified on load.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError
from blockplan.model.layers import DecoderLayer, RMSNorm, rope_cos_sin
from blockplan.model.weights import (
    CONFIG_NAME,
    MANIFEST_NAME,
    WEIGHTS_NAME,
    WeightsError,
    load_state,
    read_config,
    read_state_dict,
    save_folder,
    verify_manifest,
)

MODEL_TYPE = "blockplan_drafter"
FORMAT_VERSION = 1


def default_target_layers(num_layers: int) -> tuple[int, ...]:
    """The layers a drafter reads by default: about a third, two thirds and the last."""
    return tuple(sorted({max(0, round(num_layers * k / 3) - 1) for k in (1, 2, 3)}))


@dataclass(frozen=True)
class DrafterConfig:
    target_hidden_size: int
    target_vocab_size: int
    target_num_layers: int
    target_layers: tuple[int, ...]
    target_sha256: str
    vocab: tuple[int, ...]  # the ids the head scores, ascending
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 1
    num_heads: int = 4
    context: int = 8  # target positions before the window it reads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    extra: dict = field(default_factory=dict)  # how it was trained (reported, not read)

    def __post_init__(self) -> None:
        for name in ("target_layers", "vocab"):
            object.__setattr__(self, name, tuple(int(i) for i in getattr(self, name)))
        where = f"{MODEL_TYPE} config"
        positive = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "context")
        for name in ("target_hidden_size", "target_vocab_size", "target_num_layers", *positive):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ModelConfigError(f"{where}: {name}={value!r}: must be an integer >= 1")
        if not self.target_layers or not all(
            0 <= i < self.target_num_layers for i in self.target_layers
        ):
            raise ModelConfigError(
                f"{where}: target_layers={list(self.target_layers)}: must be layers of the "
                f"target's {self.target_num_layers}"
            )
        if not self.vocab or list(self.vocab) != sorted(set(self.vocab)):
            raise ModelConfigError(f"{where}: vocab: must be ascending distinct ids")
        if self.vocab[0] < 0 or self.vocab[-1] >= self.target_vocab_size:
            raise ModelConfigError(f"{where}: vocab: ids must be below {self.target_vocab_size}")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 2:
            raise ModelConfigError(
                f"{where}: hidden_size={self.hidden_size}: must be num_heads x an even head dim"
            )

    @property
    def feature_size(self) -> int:
        return len(self.target_layers) * self.target_hidden_size

    def layer_config(self) -> DecoderConfig:
        return DecoderConfig(
            vocab_size=1,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_heads,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            model_type=MODEL_TYPE,
            format_version=FORMAT_VERSION,
            target_layers=list(self.target_layers),
            vocab=list(self.vocab),
        )
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> DrafterConfig:
        if d.get("model_type") != MODEL_TYPE or d.get("format_version") != FORMAT_VERSION:
            raise ModelConfigError(
                f"{where}: not a format {FORMAT_VERSION} {MODEL_TYPE} config (model_type="
                f"{d.get('model_type')!r})"
            )
        known = {k: v for k, v in d.items() if k not in ("model_type", "format_version")}
        try:
            return cls(**known)
        except TypeError as e:
            raise ModelConfigError(f"{where}: {e}") from e


def decoder_sha256(decoder: nn.Module) -> str:
    """SHA-256 of a decoder's weights in float32 (names, shapes, bytes in name order): the
    identity of the target a drafter was trained for."""
    h = hashlib.sha256()
    seen: set[int] = set()
    for name, tensor in sorted(decoder.state_dict().items()):
        if tensor.data_ptr() in seen:  # a tied head: hashed once, under its first name
            continue
        seen.add(tensor.data_ptr())
        t = tensor.detach().to(torch.float32).contiguous().cpu()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


class Drafter(nn.Module):
    """The network; `bind(target)` before the first forward."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.config = config
        c, d, hd = config, config.hidden_size, config.target_hidden_size
        self.feature_norm = RMSNorm(c.feature_size, c.rms_norm_eps)
        self.feature_proj = nn.Linear(c.feature_size, d, bias=False)
        self.mask_embedding = nn.Parameter(torch.zeros(hd))
        self.token_proj = nn.Linear(hd, d, bias=False)
        layer_config = c.layer_config()
        self.layers = nn.ModuleList(DecoderLayer(layer_config, i) for i in range(c.num_layers))
        self.norm = RMSNorm(d, c.rms_norm_eps)
        self.out_proj = nn.Linear(d, hd, bias=False)
        self.out_norm = RMSNorm(hd, c.rms_norm_eps)
        self.register_buffer("vocab", torch.tensor(c.vocab, dtype=torch.long), persistent=False)
        self.embed_table: torch.Tensor | None = None  # (V, Hd) the target's, bound
        self.head: torch.Tensor | None = None  # (S, Hd) the target's LM head at `vocab`

    def reset_parameters(self, seed: int) -> Drafter:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name or name.endswith("layernorm.weight"):
                    p.fill_(1.0)
                elif p.dim() == 1:
                    p.normal_(0.0, 0.02, generator=gen)
                else:
                    p.normal_(0.0, p.shape[1] ** -0.5, generator=gen)
        return self

    def bind(self, target: nn.Module, where: str = "drafter", check: bool = True) -> Drafter:
        """Read the target decoder's embedding table and LM head rows (no copy of the
        table); raises WeightsError when the drafter was made for another target."""
        c = self.config
        tc = target.config
        shape = (tc.hidden_size, tc.vocab_size, tc.num_hidden_layers)
        if shape != (c.target_hidden_size, c.target_vocab_size, c.target_num_layers):
            raise WeightsError(
                f"{where}: made for a target of width {c.target_hidden_size}, vocabulary "
                f"{c.target_vocab_size} and {c.target_num_layers} layers, not {shape}"
            )
        if check and decoder_sha256(target) != c.target_sha256:
            raise WeightsError(
                f"{where}: target_sha256 {c.target_sha256[:12]}... is not this model's "
                "decoder weights (train a drafter for it: blockplan train-drafter)"
            )
        weight = next(target.parameters())
        self.to(weight.device, weight.dtype)
        self.embed_table = target.model.embed_tokens.weight.detach()
        self.head = target.lm_head.weight.detach()[self.vocab.to(weight.device)]
        return self

    def forward(
        self,
        features: torch.Tensor,  # (B, C, F) the target's context rows
        tokens: torch.Tensor,  # (B, W) the window's ids (anything at `unknown` slots)
        unknown: torch.Tensor,  # (B, W) bool: the slots to draft
        valid: torch.Tensor | None = None,  # (B, C + W) bool: rows that exist (keys)
    ) -> torch.Tensor:
        """Logits (B, W, S) over `vocab`: row i scores slot i of the window."""
        if self.head is None:
            raise RuntimeError("Drafter.forward: bind(target) first")
        B, C, _ = features.shape
        W = tokens.shape[1]
        context = self.feature_proj(self.feature_norm(features.to(self.head.dtype)))
        emb = F.embedding(tokens, self.embed_table)  # (B, W, Hd)
        emb = torch.where(unknown[..., None], self.mask_embedding.to(emb.dtype), emb)
        x = torch.cat([context, self.token_proj(emb)], dim=1)  # (B, C + W, d)
        positions = torch.arange(C + W, device=x.device).expand(B, C + W)
        c = self.config
        rope = rope_cos_sin(positions, c.hidden_size // c.num_heads, c.rope_theta, x.dtype)
        bias = None
        if valid is not None and not bool(valid.all()):
            bias = x.new_zeros(B, 1, 1, C + W).masked_fill(~valid[:, None, None], -torch.inf)
        for layer in self.layers:
            x = layer(x, rope, bias, None)
        h = self.out_norm(self.out_proj(self.norm(x[:, C:])))  # (B, W, Hd)
        return F.linear(h, self.head)  # (B, W, S)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def random_drafter(
    target: nn.Module,
    seed: int = 0,
    vocab: tuple[int, ...] | None = None,
    **sizes: Any,
) -> Drafter:
    """A random-init drafter for `target` (a Decoder): the worst case of acceptance."""
    tc = target.config
    config = DrafterConfig(
        target_hidden_size=tc.hidden_size,
        target_vocab_size=tc.vocab_size,
        target_num_layers=tc.num_hidden_layers,
        target_layers=sizes.pop("target_layers", default_target_layers(tc.num_hidden_layers)),
        target_sha256=decoder_sha256(target),
        vocab=tuple(range(tc.vocab_size)) if vocab is None else tuple(sorted(set(vocab))),
        **sizes,
    )
    return Drafter(config).reset_parameters(seed).bind(target, check=False).eval()


def save_drafter(drafter: Drafter, folder: str | Path) -> Path:
    """config.json, model.safetensors (float32) and manifest.json."""
    state = {k: v.detach().to(torch.float32).cpu() for k, v in drafter.state_dict().items()}
    return save_folder(state, drafter.config.to_dict(), folder)


def load_drafter(folder: str | Path, target: nn.Module | None = None) -> Drafter:
    """A drafter folder, verified against its manifest (required), bound to `target` (a
    Decoder) when given. Raises WeightsError / ModelConfigError naming the file."""
    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file():
        raise WeightsError(f"{folder / MANIFEST_NAME}: missing; a drafter folder must carry one")
    verify_manifest(folder, [CONFIG_NAME, WEIGHTS_NAME])
    config = DrafterConfig.from_dict(read_config(folder), str(folder / CONFIG_NAME))
    drafter = Drafter(config)
    load_state(drafter, read_state_dict(folder), str(folder / WEIGHTS_NAME))
    drafter.eval()
    if target is not None:
        drafter.bind(target, str(folder))
    return drafter
