"""PlannerModel: vision tower + Qwen2 decoder + the settings its prompt needs.

A model folder holds `config.json` (`model_type: blockplan_planner`, with `text_config` for
the decoder, `vision_config`, the cameras, frames, block size and schema settings),
`model.safetensors` (decoder tensors under their HF Qwen2 names `model.*` / `lm_head.*`,
vision tensors under `visual.*`), `tokenizer.json` and `manifest.json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from blockplan.model.config import DecoderConfig, ModelConfigError, check_section, shown
from blockplan.model.decoder import Decoder
from blockplan.model.ego import EgoEncoder, EgoEncoderConfig
from blockplan.model.flow_head import TRAJECTORY_HEADS, FlowHead, FlowHeadConfig
from blockplan.model.positions import PromptPositions
from blockplan.model.vision import VisionConfig, VisionTower
from blockplan.model.weights import decoder_from_state, load_state, save_folder
from blockplan.schema.layout import DEFAULT_BLOCK_SIZE, ImageSpan, PromptLayout

MODEL_TYPE = "blockplan_planner"
VISUAL_PREFIX = "visual."
FLOW_PREFIX = "flow_head."
EGO_PREFIX = "ego_encoder."

# What a frame's visual tokens attend to in the prompt (text tokens always see everything
# before them). "frame_and_header": the system header and their own frame — the layout of
# the models trained so far. "frame_only": their own frame only. Together with
# `frame_slot_embedding=False` the latter makes a frame's pre-RoPE keys and values at every
# layer independent of the slot it occupies: its tokens see nothing outside the frame, their
# inputs do not depend on the slot, and within-frame attention depends only on within-frame
# distances (RoPE). Streaming the window (streaming/prefill.py) is then exactly lossless.
VISUAL_ATTENTION = ("frame_and_header", "frame_only")
# What the model drives (docs/DESIGN.md §1): `vehicle` (the driving schema, trained with the
# two-stream SASD recipe) or `robot` (action chunks, trained with diffusion forcing).
EMBODIMENTS = ("vehicle", "robot")
# Plausibility bounds: beyond one a config.json is corrupt, refused before allocating.
MAX_CAMERAS = 64
MAX_FRAMES = 64
MAX_BLOCK_SIZE = 4096


@dataclass(frozen=True)
class PlannerModelConfig:
    decoder: DecoderConfig
    vision: VisionConfig
    camera_names: tuple[str, ...]
    num_frames: int
    block_size: int = DEFAULT_BLOCK_SIZE
    schema: dict[str, Any] = field(default_factory=dict)  # opaque to the model
    visual_attention: str = "frame_and_header"  # one of VISUAL_ATTENTION
    frame_slot_embedding: bool = True  # a learned embedding per frame slot on visual tokens
    # The spacing of the frames the model was trained with (s; the data set's frame period).
    # None: not recorded (folders written before it was); the runtime then trusts its config.
    frame_period_s: float | None = None
    embodiment: str = "vehicle"  # one of EMBODIMENTS; `schema` is then an action schema
    # How the trajectory is decoded (docs/ALGORITHMS.md §7.1): `tokens` (the answer's digit
    # tokens) or `flow` (the flow-matching head over the decoder's prefix K/V, whose
    # waypoints the codec writes into the trajectory slots).
    trajectory_head: str = "tokens"
    flow_head: FlowHeadConfig | None = None  # the head's settings when trajectory_head=flow
    # How the prompt carries the ego history (model/ego.py): None — as digit text; else the
    # numeric encoder's settings (its embeddings fill `tokens` prompt slots).
    ego_encoder: EgoEncoderConfig | None = None

    # What the serving paths can do with the model (the Planner reads these, never the class):
    exportable = True  # static-shape graphs: `blockplan export`, onnxruntime / tensorrt
    can_stream = True  # the streaming window: vision per frame, pre-RoPE K/V reuse

    def __post_init__(self) -> None:
        if not self.camera_names:
            raise ModelConfigError("camera_names=(): at least one camera is required")
        names = self.camera_names
        if (
            len(names) > MAX_CAMERAS
            or len(set(names)) != len(names)
            or not all(isinstance(n, str) and n for n in names)
        ):
            raise ModelConfigError(
                f"camera_names={shown(list(names))}: must be at most {MAX_CAMERAS} different "
                "non-empty names"
            )
        if not 1 <= self.num_frames <= MAX_FRAMES:
            raise ModelConfigError(f"num_frames={self.num_frames}: must be in [1, {MAX_FRAMES}]")
        if not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise ModelConfigError(
                f"block_size={self.block_size}: must be in [1, {MAX_BLOCK_SIZE}]"
            )
        if self.trajectory_head not in TRAJECTORY_HEADS:
            raise ModelConfigError(
                f"trajectory_head={self.trajectory_head!r}: must be one of {list(TRAJECTORY_HEADS)}"
            )
        if self.trajectory_head == "flow":
            if self.embodiment != "vehicle":
                raise ModelConfigError("trajectory_head='flow': vehicle models only")
            if self.flow_head is None:
                object.__setattr__(self, "flow_head", FlowHeadConfig())
            self.flow_head.decoder_layers(self.decoder)  # raises on a layer out of range
        elif self.flow_head is not None:
            raise ModelConfigError("flow_head settings given, but trajectory_head is 'tokens'")
        if self.ego_encoder is not None:
            if self.embodiment != "vehicle":
                raise ModelConfigError("ego_encoder: vehicle models only")
            if self.ego_encoder.scene and (
                not self.vision.scene or "front" not in self.camera_names
            ):
                raise ModelConfigError(
                    "ego_encoder.scene reads the front camera's scene token: the model needs "
                    "vision.scene and a camera 'front'"
                )
            rows = self.schema.get("num_history")
            if rows is not None and rows != self.ego_encoder.rows:
                raise ModelConfigError(
                    f"ego_encoder.rows={self.ego_encoder.rows}, the schema has num_history={rows}"
                )
        if self.embodiment not in EMBODIMENTS:
            raise ModelConfigError(
                f"embodiment={self.embodiment!r}: must be one of {list(EMBODIMENTS)}"
            )
        if self.frame_period_s is not None and not (
            isinstance(self.frame_period_s, (int, float)) and self.frame_period_s > 0
        ):
            raise ModelConfigError(f"frame_period_s={self.frame_period_s!r}: must be > 0")
        if self.visual_attention not in VISUAL_ATTENTION:
            raise ModelConfigError(
                f"visual_attention={self.visual_attention!r}: must be one of "
                f"{list(VISUAL_ATTENTION)}"
            )
        if not isinstance(self.frame_slot_embedding, bool):
            raise ModelConfigError(
                f"frame_slot_embedding={self.frame_slot_embedding!r}: must be true or false"
            )

    @property
    def tokens_per_image(self) -> int:
        return self.vision.tokens_per_image

    @property
    def ego_tokens(self) -> int:
        """Prompt slots of the numeric ego encoder (0: the history is digit text)."""
        return 0 if self.ego_encoder is None else self.ego_encoder.tokens

    @property
    def cache_attention(self) -> str:
        """How the K/V of a finished block were computed in training, hence how the engine
        commits them: `causal` (token-causal, the clean AR stream of SASD; vehicle) or
        `block` (bidirectional inside the block, diffusion forcing; robot)."""
        return "block" if self.embodiment == "robot" else "causal"

    @property
    def streams_exactly(self) -> bool:
        """Whether a frame's cached K/V stay exact when the frame moves to another slot."""
        return self.visual_attention == "frame_only" and not self.frame_slot_embedding

    def to_dict(self) -> dict[str, Any]:
        # Vehicle folders stay as they were: the key is written for robots only.
        extra = {} if self.embodiment == "vehicle" else {"embodiment": self.embodiment}
        if self.trajectory_head == "flow":  # token-head folders stay as they were
            extra |= {"trajectory_head": "flow", "flow_head": self.flow_head.to_dict()}
        if self.ego_encoder is not None:  # digit-prompt folders stay as they were
            extra |= {"ego_encoder": self.ego_encoder.to_dict()}
        return {
            "model_type": MODEL_TYPE,
            "text_config": self.decoder.to_dict(),
            "vision_config": self.vision.to_dict(),
            "camera_names": list(self.camera_names),
            "num_frames": self.num_frames,
            "tokens_per_image": self.tokens_per_image,
            "block_size": self.block_size,
            "schema": self.schema,
            "visual_attention": self.visual_attention,
            "frame_slot_embedding": self.frame_slot_embedding,
            **extra,
        } | ({} if self.frame_period_s is None else {"frame_period_s": self.frame_period_s})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PlannerModelConfig:
        """From a folder's config.json object; a key of the wrong JSON type, out of range or
        missing is a ModelConfigError naming it (the caller adds the file)."""
        check_section(cls, d, "")  # the scalar keys; the sections check themselves
        for key, kind in (
            ("camera_names", list),
            ("num_frames", int),
            ("block_size", int),
            ("tokens_per_image", int),
            ("schema", dict),
            ("visual_attention", str),
            ("embodiment", str),
            ("trajectory_head", str),
        ):
            value = d.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ModelConfigError(f"{key}={shown(value)}: must be a JSON {kind.__name__}")
        for key in ("text_config", "vision_config", "flow_head", "ego_encoder"):
            if d.get(key) is not None and not isinstance(d[key], dict):
                raise ModelConfigError(f"{key}={shown(d[key])}: must be a JSON object")
        config = cls._from_checked_dict(d)
        recorded = d.get("tokens_per_image")
        if recorded is not None and recorded != config.tokens_per_image:
            raise ModelConfigError(
                f"tokens_per_image={recorded}: vision_config makes {config.tokens_per_image}"
            )
        return config

    @classmethod
    def _from_checked_dict(cls, d: dict[str, Any]) -> PlannerModelConfig:
        try:
            return cls(
                decoder=DecoderConfig.from_dict(d["text_config"], "text_config."),
                vision=VisionConfig.from_dict(d["vision_config"]),
                camera_names=tuple(d["camera_names"]),
                num_frames=int(d["num_frames"]),
                block_size=int(d.get("block_size", DEFAULT_BLOCK_SIZE)),
                schema=dict(d.get("schema") or {}),
                # Folders written before these settings existed have the default layout.
                visual_attention=str(d.get("visual_attention", "frame_and_header")),
                frame_slot_embedding=d.get("frame_slot_embedding", True),
                frame_period_s=d.get("frame_period_s"),
                embodiment=str(d.get("embodiment", "vehicle")),
                trajectory_head=str(d.get("trajectory_head", "tokens")),
                flow_head=None
                if d.get("flow_head") is None
                else FlowHeadConfig.from_dict(dict(d["flow_head"])),
                ego_encoder=None
                if d.get("ego_encoder") is None
                else EgoEncoderConfig.from_dict(dict(d["ego_encoder"])),
            )
        except KeyError as e:
            raise ModelConfigError(f"config.json lacks {e.args[0]!r}") from e


class PlannerModel(nn.Module):
    """The planner's network. Its forward is the decoder's (token ids or embeddings)."""

    def __init__(self, config: PlannerModelConfig) -> None:
        super().__init__()
        self.config = config
        self.decoder = Decoder(config.decoder)
        self.visual = VisionTower(
            config.vision,
            config.decoder.hidden_size,
            len(config.camera_names),
            config.num_frames,
            frame_slot_embedding=config.frame_slot_embedding,
        )
        self.flow_head = (
            FlowHead(config.flow_head, config.decoder) if config.trajectory_head == "flow" else None
        )
        self.ego_encoder = (
            None
            if config.ego_encoder is None
            else EgoEncoder(config.ego_encoder, config.decoder.hidden_size)
        )

    def forward(self, input_ids: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        return self.decoder(input_ids, **kwargs)

    @property
    def decoder_config(self) -> DecoderConfig:
        return self.config.decoder

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.decoder.embed(input_ids)

    def embed_prompt(
        self,
        token_ids: torch.Tensor,  # (P,) with placeholders at visual positions
        image_spans: tuple[ImageSpan, ...],
        visual: torch.Tensor,  # (K*T, G, W) from `self.visual`, view-major
        ego_span: tuple[int, int] | None = None,
        ego_history: torch.Tensor | np.ndarray | None = None,  # (rows, 6)
        lane_pose: torch.Tensor | np.ndarray | None = None,  # (2,), NaN or None: unknown
        lead: torch.Tensor | np.ndarray | None = None,  # (2,) gap (inf: none), speed; NaN: unknown
        beside: torch.Tensor | np.ndarray | None = None,  # (2, 5) lanes beside; NaN: unknown
        route_ahead: torch.Tensor | np.ndarray | None = None,  # (A, 2) route ahead; NaN: unknown
    ) -> torch.Tensor:
        """Prompt embeddings (1, P, W): token embeddings with each span's placeholders
        replaced by its image's visual tokens, and (models with an ego encoder) the ego
        slots [ego_span) by the encoder's embeddings of `ego_history` (and `lane_pose`,
        `lead`, `beside`, `route_ahead` where the encoder reads them; model/ego.py)."""
        embeds = self.embed(token_ids[None]).clone()  # (1, P, W)
        if (self.ego_encoder is None) != (ego_span is None) or (
            (ego_span is None) != (ego_history is None)
        ):
            raise ValueError(
                "an ego-encoder model needs the prompt's ego slots and the ego history, a "
                "digit-prompt model neither (render the prompt with the model's ego_tokens)"
            )
        if ego_span is not None:
            start, end = ego_span
            if not isinstance(ego_history, torch.Tensor):
                ego_history = torch.tensor(np.asarray(ego_history, dtype=np.float32))
            history = ego_history.to(embeds.device)
            if lane_pose is not None and not isinstance(lane_pose, torch.Tensor):
                lane_pose = torch.tensor(np.asarray(lane_pose, dtype=np.float64))
            if lead is not None and not isinstance(lead, torch.Tensor):
                lead = torch.tensor(np.asarray(lead, dtype=np.float64))
            if beside is not None and not isinstance(beside, torch.Tensor):
                beside = torch.tensor(np.asarray(beside, dtype=np.float64))
            if route_ahead is not None and not isinstance(route_ahead, torch.Tensor):
                route_ahead = torch.tensor(np.asarray(route_ahead, dtype=np.float64))
            scene = None
            if self.ego_encoder.config.scene:  # the front camera's newest scene token
                T = self.config.num_frames
                scene = visual[self.config.camera_names.index("front") * T + T - 1, -1]  # (W,)
            slots = self.ego_encoder(history, lane_pose, scene, lead, beside, route_ahead)  # (E, W)
            if end - start != slots.shape[0]:
                raise ValueError(
                    f"ego slots {ego_span}: {end - start} slots, the encoder makes {slots.shape[0]}"
                )
            embeds[0, start:end] = slots.to(embeds.dtype)
        T = self.config.num_frames
        for span in image_spans:
            index = span.camera_index * T + span.frame_index  # view-major
            if span.end - span.start != visual.shape[1]:
                raise ValueError(
                    f"image span {span}: {span.end - span.start} slots, the model makes "
                    f"{visual.shape[1]} tokens per image"
                )
            embeds[0, span.start : span.end] = visual[index]
        return embeds

    def prompt_positions(self, layout: PromptLayout) -> PromptPositions | None:
        """None: the prompt sits at positions 0..P-1 and the answer continues at P."""
        return None

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # ---- folders ---------------------------------------------------------------------------

    def folder_state(self) -> dict[str, torch.Tensor]:
        """State dict under the folder's names: HF Qwen2 names + `visual.*`."""
        out = {}
        for name, tensor in self.state_dict().items():
            out[name.removeprefix("decoder.")] = tensor
        return out

    def save_pretrained(
        self,
        path: str | Path,
        tokenizer_json: str | None = None,
        extra_files: dict[str, str] | None = None,
    ) -> Path:
        """The model folder; `extra_files` (name -> text, e.g. the answer n-gram table) are
        written next to the weights and covered by the manifest."""
        extra = {"tokenizer.json": tokenizer_json} if tokenizer_json is not None else {}
        return save_folder(
            self.folder_state(), self.config.to_dict(), path, extra | (extra_files or {})
        )

    def load_parts(self, state: dict[str, torch.Tensor], where: str) -> None:
        """Load the vision tower, the flow head and the ego encoder in place from a folder's
        tensors (the decoder is loaded apart); a part the config lacks must have no tensors."""
        visual = {
            k.removeprefix(VISUAL_PREFIX): v
            for k, v in state.items()
            if k.startswith(VISUAL_PREFIX)
        }
        load_state(self.visual, visual, where)
        for prefix, part, what in (
            (FLOW_PREFIX, self.flow_head, "a token-head model"),
            (EGO_PREFIX, self.ego_encoder, "a digit-prompt model"),
        ):
            tensors = {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
            if part is not None:
                load_state(part, tensors, where)
            elif tensors:
                raise ModelConfigError(f"{where}: {prefix}* tensors in {what}")

    @classmethod
    def from_config_and_state(
        cls,
        raw: dict[str, Any] | PlannerModelConfig,
        state: dict[str, torch.Tensor],
        where: str,
    ) -> PlannerModel:
        config = raw if isinstance(raw, PlannerModelConfig) else PlannerModelConfig.from_dict(raw)
        check_sizes(config, state, where)
        model = cls(config)
        text = {
            k: v
            for k, v in state.items()
            if not k.startswith((VISUAL_PREFIX, FLOW_PREFIX, EGO_PREFIX))
        }
        decoder = decoder_from_state(config.decoder, text, where)
        model.decoder.load_state_dict(decoder.state_dict())
        model.load_parts(state, where)
        return model


def check_sizes(config: PlannerModelConfig, state: dict[str, torch.Tensor], where: str) -> None:
    """Refuse a config whose sizes ask for far more weights than the folder's tensors hold,
    before any is allocated: the decoder's lower bound (its matrices, known from the config
    alone) and the other parts' exact counts (built on the meta device, which allocates
    nothing; the config's bounds keep them small to build). Within twice the tensors held
    (and 1 M weights) the model is built and the strict load names the tensors that differ;
    beyond, a config that wants them allocates nothing."""
    held = sum(t.numel() for t in state.values())
    with torch.device("meta"):
        parts = [
            VisionTower(
                config.vision,
                config.decoder.hidden_size,
                len(config.camera_names),
                config.num_frames,
                frame_slot_embedding=config.frame_slot_embedding,
            )
        ]
        if config.ego_encoder is not None:
            parts.append(EgoEncoder(config.ego_encoder, config.decoder.hidden_size))
    wanted = config.decoder.parameters_lower_bound() + sum(
        p.numel() for part in parts for p in part.parameters()
    )
    if wanted > 2 * held + (1 << 20):
        c = config.decoder
        raise ModelConfigError(
            f"the config's sizes (text_config vocab_size={c.vocab_size}, "
            f"hidden_size={c.hidden_size}, intermediate_size={c.intermediate_size}, "
            f"num_hidden_layers={c.num_hidden_layers}, num_attention_heads="
            f"{c.num_attention_heads}, head_dim={c.dim_per_head}; vision_config, "
            f"camera_names, num_frames, ego_encoder) want at least {wanted:,} weights; the "
            f"weights file holds {held:,}"
        )
