"""What a robot training run builds and trains on: the `RobotRecipe` (action schema,
tokenizer, scaffold, prompt template, model config) and the encoded `RobotExamples` of one
split of a robot data set (`robot_data.py`)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from blockplan.model.planner_model import PlannerModelConfig
from blockplan.model.presets import robot_preset_config, robot_preset_names
from blockplan.schema import PromptLayout, Scaffold, Tokenizer, default_tokenizer
from blockplan.schema.action import (
    ActionSchema,
    action_schema_from_dict,
    action_schema_to_dict,
    compile_action_scaffold,
    encode_actions,
    render_robot_prompt,
)
from blockplan.schema.action.prompt import check_instructions
from blockplan.train.examples import ExampleEncoder
from blockplan.train.robot_data import (
    SCENE_DIM,
    RobotDataError,
    chunk_at,
    data_ranges,
    episodes_of,
    frame_indices,
    read_robot_manifest,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RobotRecipe:
    """Schema + tokenizer + model config of one robot run (also what evaluation needs)."""

    model_config: PlannerModelConfig
    schema: ActionSchema
    tokenizer: Tokenizer

    @classmethod
    def build(
        cls,
        arch: str,
        data: str | Path,
        horizon: int = 8,
        num_bins: int = 256,
        block_size: int | None = None,
        num_frames: int = 1,
        instruction_budget: int = 16,
        quantile: float = 0.01,
        tokenizer: Tokenizer | None = None,
        keypoints: int = 0,
        scene_token: bool = False,
    ) -> RobotRecipe:
        """A recipe for the data set at `data`: its cameras and dimensions, bins over the
        training split's per-dimension ranges, block size `block_size` (default: the action
        dimension), `keypoints` spatial-softmax points per image, `scene_token` the scene
        head and its token per image (model/vision.py; the data set's SCENE_DIM numbers)."""
        if arch not in robot_preset_names():
            raise RobotDataError(f"arch={arch!r}: must be one of {robot_preset_names()}")
        manifest = read_robot_manifest(data)
        tokenizer = tokenizer or default_tokenizer()
        schema = ActionSchema(
            horizon=horizon,
            action_dim=int(manifest["action_dim"]),
            num_bins=num_bins,
            proprio_dim=int(manifest["proprio_dim"]),
            instruction_budget=instruction_budget,
            bin_token_offset=tokenizer.vocab_size,
            **data_ranges(data, quantile),
        )
        config = robot_preset_config(
            arch,
            schema.vocab_size(tokenizer),
            tuple(manifest["camera_names"]),
            num_frames,
            block_size=block_size or schema.action_dim,
            schema=action_schema_to_dict(schema),
            max_position_embeddings=2048,
        )
        if keypoints or scene_token:
            vision = dataclasses.replace(
                config.vision, keypoints=keypoints, scene=SCENE_DIM if scene_token else 0
            )
            config = dataclasses.replace(config, vision=vision)
        return cls(config, schema, tokenizer)

    @classmethod
    def of_config(cls, config: PlannerModelConfig, tokenizer: Tokenizer) -> RobotRecipe:
        return cls(config, action_schema_from_dict(config.schema), tokenizer)

    @classmethod
    def of_folder(cls, folder: str | Path, data: str | Path) -> RobotRecipe:
        """The recipe of the robot model folder `folder` (fine-tuning it on `data`): its
        config, tokenizer and action schema, bin ranges included, so its weights keep their
        meaning; values of `data` outside those ranges are clipped (counted in
        `RobotExamples.num_clipped`). `data` must have the folder's dimensions."""
        from blockplan.model.weights import read_config
        from blockplan.schema.tokenizer import load_tokenizer

        raw = read_config(folder)
        if raw.get("model_type") != "blockplan_planner" or raw.get("embodiment") != "robot":
            raise RobotDataError(f"{folder}: not a robot model folder")
        config = PlannerModelConfig.from_dict(raw)
        recipe = cls.of_config(config, load_tokenizer(folder))
        manifest = read_robot_manifest(data)
        for key in ("action_dim", "proprio_dim"):
            ours, theirs = getattr(recipe.schema, key), int(manifest[key])
            if ours != theirs:
                raise RobotDataError(f"{data}: {key}={theirs}, the model {folder} has {ours}")
        return recipe  # its cameras are checked where the examples load

    @cached_property
    def scaffold(self) -> Scaffold:
        return compile_action_scaffold(self.schema, self.tokenizer, self.model_config.block_size)

    @cached_property
    def template(self) -> PromptLayout:
        mc = self.model_config
        return render_robot_prompt(
            None, self.tokenizer, self.schema, mc.camera_names, mc.num_frames, mc.tokens_per_image
        )


@dataclass
class RobotExamples(torch.utils.data.Dataset):
    """Encoded samples of one split (arrays share the first axis N)."""

    prompt_ids: np.ndarray  # (N, P) int64
    answer_ids: np.ndarray  # (N, A) int64
    images: np.ndarray  # (N, K*T, H, W, 3) uint8, view-major, model size
    actions: np.ndarray  # (N, H, D) float64, the true chunk (before quantization)
    proprio: np.ndarray  # (N, S) float64
    instruction: np.ndarray  # (N,) str
    episode: np.ndarray  # (N,) int, index of the episode in the split
    scene: np.ndarray  # (N, 9) float32 object, goal, hand positions at the step; NaN: unknown
    num_clipped: int = 0  # action values outside the bins' ranges (clipped)

    def __len__(self) -> int:
        return int(self.prompt_ids.shape[0])

    def __getitem__(self, i: int) -> int:
        return i

    def batch(self, indices: list[int], scene: bool = False) -> dict[str, torch.Tensor]:
        """Tensors of the samples at `indices`; with `scene`, the scene probe's targets."""
        idx = np.asarray(indices, dtype=np.int64)
        out = {
            "prompt_ids": torch.from_numpy(self.prompt_ids[idx]),
            "answer_ids": torch.from_numpy(self.answer_ids[idx]),
            "images": torch.from_numpy(self.images[idx]),
        }
        return out | ({"scene": torch.from_numpy(self.scene[idx])} if scene else {})


def load_robot_examples(
    root: str | Path, split: str, recipe: RobotRecipe, frame_stride: int = 1
) -> RobotExamples:
    """Every step of every episode of `split`, encoded against `recipe`."""
    episodes = episodes_of(root, split)
    if not episodes:
        raise RobotDataError(f"{root}: no episodes in split {split!r}")
    manifest = read_robot_manifest(root)
    mc, schema = recipe.model_config, recipe.schema
    names = list(manifest["camera_names"])
    missing = [c for c in mc.camera_names if c not in names]
    if missing:
        raise RobotDataError(f"{root}: no camera {missing[0]!r} (cameras: {names})")
    order = [names.index(c) for c in mc.camera_names]
    # two tasks whose instructions are cut to the same prompt: an error, not a silent merge
    cut = check_instructions([e["instruction"] for e in episodes], recipe.tokenizer, schema)
    for text, count in cut.items():
        log.warning(
            "instruction %r: %d tokens, cut to the instruction budget of %d",
            text,
            count,
            schema.instruction_budget,
        )
    resize = ExampleEncoder(recipe).resize
    rows: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "answer_ids", "images")}
    keys = ("actions", "proprio", "instruction", "episode", "scene")
    extra: dict[str, list[Any]] = {k: [] for k in keys}
    clipped = 0
    for e, episode in enumerate(episodes):
        frames = episode["frames"][:, order]  # (T, K, H', W', 3) in the model's camera order
        unknown = np.full((len(episode["actions"]), SCENE_DIM), np.nan, np.float32)
        scene = episode.get("scene", unknown).astype(np.float32)
        for t in range(len(episode["actions"])):
            chunk = chunk_at(episode["actions"], t, schema.horizon)
            ids, n = encode_actions(chunk, recipe.scaffold, recipe.tokenizer, schema)
            clipped += n
            picked = frames[frame_indices(t, mc.num_frames, frame_stride)]  # (F, K, ...)
            view_major = picked.transpose(1, 0, 2, 3, 4).reshape(-1, *picked.shape[2:])
            layout = render_robot_prompt(
                None,
                recipe.tokenizer,
                schema,
                mc.camera_names,
                mc.num_frames,
                mc.tokens_per_image,
                proprio=episode["proprio"][t],
                instruction=episode["instruction"],
            )
            rows["prompt_ids"].append(np.asarray(layout.token_ids))
            rows["answer_ids"].append(ids)
            rows["images"].append(resize(view_major))
            extra["actions"].append(chunk)
            extra["proprio"].append(episode["proprio"][t].astype(np.float64))
            extra["instruction"].append(episode["instruction"])
            extra["episode"].append(e)
            extra["scene"].append(scene[t])
    arrays = {k: np.stack(v) for k, v in {**rows, **extra}.items()}
    return RobotExamples(**arrays, num_clipped=clipped)
