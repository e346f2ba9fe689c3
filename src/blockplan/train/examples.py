"""Training examples: one sample as token ids and model-size images, and the two sources.

An `Examples` set holds every sample of a split in memory, already encoded against a
`Recipe`: the prompt ids (N, P) (every prompt has the template's length and image spans),
the answer ids (N, A), the images (N, K*T, H, W, 3) uint8 resized once to the model's input
size, and what evaluation needs (the 4 Hz future, the ego-frame velocity, scenario/seed).

Sources:
* simulator shards (`blockplan dataset` output: DIR/manifest.json + DIR/<split>/*.npz);
* Fast-dDrive JSON records (a list of chat records with image paths and the answer fields,
  e.g. DIR/fastddrive/<split>.json as `blockplan dataset` exports them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from tqdm import tqdm

from blockplan.errors import UserError
from blockplan.schema import SECTION_NAMES, ego_history_array, encode_answer, render_prompt
from blockplan.train.recipe import Recipe
from blockplan.types import ROUTE_AHEAD_M, DrivingAnswer


class DataError(UserError, ValueError):
    """A data folder or record that cannot be read as training data; names what."""


@dataclass
class Examples(torch.utils.data.Dataset):
    """Encoded samples of one split (arrays share the first axis N)."""

    prompt_ids: np.ndarray  # (N, P) int64
    answer_ids: np.ndarray  # (N, A) int64
    images: np.ndarray  # (N, K*T, H, W, 3) uint8, view-major, model size
    future_xy: np.ndarray  # (N, 20, 2) float, 4 Hz ground truth (t = 0.25 .. 5 s)
    velocity: np.ndarray  # (N, 2) ego-frame velocity at t0 (constant-velocity baseline)
    ego_history: np.ndarray  # (N, num_history, 6) the prompt's ego history (ego-MLP baseline)
    command: np.ndarray  # (N,) index of the route command in the schema's list
    episode: np.ndarray  # (N,) str "<scenario>-<seed>"
    stamp_ns: np.ndarray  # (N,) int64
    lane_pose: np.ndarray  # (N, 2) float32 lane offset (m), heading error (rad); NaN: unknown
    # (N, 2) float32 gap (m) to the nearest car ahead in the ego's lane and its speed (m/s);
    # gap inf: no such car, NaN: unknown (data recorded before the gap was)
    lead: np.ndarray
    # (N, 2, 5) float32 the lanes beside, per side: lanes, gap and speed of the car ahead and
    # of the car behind in that lane line (sim/dataset.py `shard_beside`); NaN: unknown
    beside: np.ndarray
    # (N, A, 2) float32 the route ahead in the ego frame at t0 (sim/dataset.py
    # `shard_route_ahead`); NaN: unknown
    route_ahead: np.ndarray
    # (N, len(SECTION_NAMES)) bool: which answer sections are labels; the loss skips the
    # tokens of the others (a bag cannot label critical objects or an explanation,
    # replay/dataset.py). Simulator and Fast-dDrive samples: all known.
    known_sections: np.ndarray

    def __len__(self) -> int:
        return int(self.prompt_ids.shape[0])

    def __getitem__(self, i: int) -> int:
        return i

    def batch(
        self, indices: list[int], lane_pose: bool = False, lead: bool = False
    ) -> dict[str, torch.Tensor]:
        """Tensors of the samples at `indices`: prompt_ids (B, P), answer_ids (B, A),
        images (B, K*T, H, W, 3) uint8, ego_history (B, num_history, 6) float32 (what a
        numeric ego encoder reads; a digit prompt already holds it); with `lane_pose` and
        `lead`, the (B, 2) targets of the training-only probes; where a sample has an
        unknown section, known_sections (B, num_sections) bool."""
        idx = np.asarray(indices, dtype=np.int64)
        out = {
            "prompt_ids": torch.from_numpy(self.prompt_ids[idx]),
            "answer_ids": torch.from_numpy(self.answer_ids[idx]),
            "images": torch.from_numpy(self.images[idx]),
            "ego_history": torch.from_numpy(self.ego_history[idx].astype(np.float32)),
        }
        if lane_pose:
            out["lane_pose"] = torch.from_numpy(self.lane_pose[idx])
        if lead:
            out["lead"] = torch.from_numpy(self.lead[idx])
        known = self.known_sections[idx]
        if not known.all():  # all known: the loss as it always was
            out["known_sections"] = torch.from_numpy(known)
        return out


class ExampleEncoder:
    """Encodes (images, ego history, command, answer) against one recipe."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.template = recipe.template
        vision = recipe.model_config.vision
        self.size = (vision.image_height, vision.image_width)

    def resize(self, images: np.ndarray) -> np.ndarray:
        """uint8 (N, H', W', 3) at any size → uint8 (N, H, W, 3) at the model's size, with the
        vision tower's own resampling (bilinear, antialiased)."""
        return resize_images(images, self.size)

    def prompt_ids(self, ego_history: np.ndarray, route_command: str) -> np.ndarray:
        """(P,) prompt ids for a (num_history, 6) ego history in the recipe's schema."""
        mc = self.recipe.model_config
        layout = render_prompt(
            None,
            self.recipe.tokenizer,
            self.recipe.schema,
            mc.camera_names,
            mc.num_frames,
            mc.tokens_per_image,
            ego_history=ego_history,
            route_command=route_command,
            ego_tokens=mc.ego_tokens,
        )
        assert len(layout) == len(self.template), "prompt length is fixed by the schema"
        return np.asarray(layout.token_ids)

    def answer_ids(self, answer: DrivingAnswer) -> np.ndarray:
        ids, _ = encode_answer(
            answer, self.recipe.scaffold, self.recipe.tokenizer, self.recipe.schema
        )
        return ids


def resize_images(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 (N, H', W', 3) → uint8 (N, H, W, 3) for `size` (H, W), with the vision tower's
    own resampling (bilinear, antialiased); unchanged at that size already."""
    if tuple(images.shape[1:3]) == tuple(size):
        return np.ascontiguousarray(images)
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=tuple(size), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def resample_history(history: np.ndarray, period_s: float, schema) -> np.ndarray:
    """(M, 6) rows at t = -(M-1)·period … 0 → the schema's (num_history, 6) rows (linear
    interpolation in time, held beyond the oldest row)."""
    history = np.asarray(history, dtype=np.float64)
    if history.ndim != 2 or history.shape[1] != 6 or len(history) < 1:
        raise DataError(f"ego_history shape {history.shape}: expected (M, 6)")
    src_t = -period_s * np.arange(len(history) - 1, -1, -1)
    dst_t = -schema.history_period_s * np.arange(schema.num_history - 1, -1, -1)
    return np.stack([np.interp(dst_t, src_t, history[:, k]) for k in range(6)], axis=-1)


def _collect(rows: list[dict]) -> Examples:
    if not rows:
        raise DataError("no samples")
    return Examples(**{k: np.stack([r[k] for r in rows]) for k in rows[0]})


def concat_examples(parts: list[Examples]) -> Examples:
    """Samples of several sources encoded against one recipe, in order."""
    if not parts:
        raise DataError("no samples")
    if len(parts) == 1:
        return parts[0]
    keys = [f.name for f in fields(Examples)]
    return Examples(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in keys})


def read_manifest(root: str | Path) -> dict:
    from blockplan.sim.dataset import MANIFEST

    path = Path(root) / MANIFEST
    if not path.is_file():
        raise DataError(f"{root}: no {MANIFEST} (not a `blockplan dataset` folder)")
    return json.loads(path.read_text())


def load_shards(
    root: str | Path,
    split: str,
    recipe: Recipe,
    progress: bool = False,
    with_images: bool = True,
    manifest: dict | None = None,
) -> Examples:
    """Every sample of `split` of a simulator data set, encoded against `recipe`, in manifest
    order (`with_images=False`: (N, 0, 1, 1, 3) image placeholders, for the baselines;
    `manifest`: the already-read manifest, so a caller sees one consistent episode list)."""
    from blockplan.sim.dataset import (
        load_shard,
        sample_answer,
        sample_observation,
        shard_beside,
        shard_route_ahead,
    )

    root = Path(root)
    manifest = manifest or read_manifest(root)
    entries = [e for e in manifest["episodes"] if e["split"] == split]
    if not entries:
        raise DataError(f"{root}: no episodes in split {split!r}")
    encoder = ExampleEncoder(recipe)
    mc, schema = recipe.model_config, recipe.schema
    rows: list[dict] = []
    for entry in tqdm(entries, desc=f"load {split}", unit="ep", disable=not progress):
        shard = load_shard(root / entry["shard"])
        names = [str(n) for n in shard["camera_names"]]
        missing = [c for c in mc.camera_names if c not in names]
        if missing or shard["images"].shape[2] != mc.num_frames:
            raise DataError(
                f"{entry['shard']}: cameras {names} x {shard['images'].shape[2]} frames; the "
                f"model needs {list(mc.camera_names)} x {mc.num_frames}"
            )
        order = [names.index(c) for c in mc.camera_names]
        unknown = np.full((shard["stamp_ns"].shape[0], 2), np.nan, np.float32)
        lane_pose = shard["lane_pose"].astype(np.float32) if "lane_pose" in shard else unknown
        lead = shard["lead"].astype(np.float32) if "lead" in shard else unknown
        beside = shard_beside(shard)
        route = shard_route_ahead(shard)
        known = shard_known_sections(shard)
        for i in range(shard["stamp_ns"].shape[0]):
            obs = sample_observation(shard, i)
            images = shard["images"][i][order]  # (K, T, H', W', 3) in the model's order
            history = ego_history_array(obs.ego_history, obs.stamp_ns, schema)
            rows.append(
                {
                    "prompt_ids": encoder.prompt_ids(history, obs.route_command),
                    "answer_ids": encoder.answer_ids(sample_answer(shard, i)),
                    "images": encoder.resize(images.reshape(-1, *images.shape[2:]))
                    if with_images
                    else np.zeros((0, 1, 1, 3), np.uint8),
                    "future_xy": shard["future_xy"][i].astype(np.float64),
                    "velocity": history[-1, 2:4],
                    "ego_history": history,
                    "command": schema.route_commands.index(obs.route_command),
                    "episode": np.asarray(f"{entry['scenario']}-{entry['seed']}"),
                    "stamp_ns": np.asarray(obs.stamp_ns, dtype=np.int64),
                    "lane_pose": lane_pose[i],
                    "lead": lead[i],
                    "beside": beside[i],
                    "route_ahead": route[i],
                    "known_sections": known[i],
                }
            )
    return _collect(rows)


def shard_known_sections(shard: dict[str, np.ndarray]) -> np.ndarray:
    """(N, len(SECTION_NAMES)) bool: the shard's `known_sections` (a bag data set's), or all
    known (a simulator shard, which has no such array)."""
    n = shard["stamp_ns"].shape[0]
    if "known_sections" not in shard:
        return np.ones((n, len(SECTION_NAMES)), dtype=bool)
    known = np.asarray(shard["known_sections"], dtype=bool)
    if known.shape != (n, len(SECTION_NAMES)):
        raise DataError(
            f"known_sections shape {known.shape}: expected ({n}, {len(SECTION_NAMES)}) "
            f"(sections {list(SECTION_NAMES)})"
        )
    return known


def load_fastddrive(path: str | Path, recipe: Recipe, history_period_s: float = 0.5) -> Examples:
    """Samples from a Fast-dDrive JSON file (image paths resolve against its folder).

    Each record needs `image` (K*T paths, view-major in the model's camera order),
    `ego_history` ((M, 6) rows `history_period_s` apart, oldest first, ego frame at t0) and
    the answer (structured fields or the gpt turn); `route_command` defaults to the schema's
    first, `future_trajectory_4hz` to the JMT upsampling of the answer's waypoints.
    """
    from blockplan.sim.fastddrive import FastDDriveError, record_from_dict
    from blockplan.trajectory import upsample

    path = Path(path)
    try:
        records = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise DataError(f"cannot read {path}: {e}") from e
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of records")
    encoder = ExampleEncoder(recipe)
    mc, schema = recipe.model_config, recipe.schema
    num_images = len(mc.camera_names) * mc.num_frames
    rows: list[dict] = []
    for raw in records:
        try:
            rec = record_from_dict(raw, path.parent)
        except FastDDriveError as e:
            raise DataError(str(e)) from e
        if len(rec.image_paths) != num_images or rec.ego_history is None:
            raise DataError(
                f"record {rec.id!r}: {len(rec.image_paths)} images (needs {num_images}) and "
                f"ego_history {'missing' if rec.ego_history is None else 'present'}"
            )
        images = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in rec.image_paths])
        history = resample_history(rec.ego_history, history_period_s, schema)
        future = rec.future_trajectory
        if future is None:
            future = upsample(rec.answer.waypoints).xy
        command = str(raw.get("route_command") or schema.route_commands[0])
        rows.append(
            {
                "prompt_ids": encoder.prompt_ids(history, command),
                "answer_ids": encoder.answer_ids(rec.answer),
                "images": encoder.resize(images),
                "future_xy": np.asarray(future, dtype=np.float64),
                "velocity": history[-1, 2:4],
                "ego_history": history,
                "command": schema.route_commands.index(command),
                "episode": np.asarray(f"{raw.get('scenario', 'json')}-{raw.get('seed', 0)}"),
                "stamp_ns": np.asarray(int(raw.get("stamp_ns", 0)), dtype=np.int64),
                "lane_pose": np.full(2, np.nan, np.float32),
                "lead": np.full(2, np.nan, np.float32),
                "beside": np.full((2, 5), np.nan, np.float32),
                "route_ahead": np.full((len(ROUTE_AHEAD_M), 2), np.nan, np.float32),
                "known_sections": np.ones(len(SECTION_NAMES), dtype=bool),
            }
        )
    return _collect(rows)


def load_examples(source: str | Path, split: str, recipe: Recipe, progress: bool = False):
    """A data set folder (shards of `split`), or a Fast-dDrive JSON file."""
    source = Path(source)
    if source.is_file() and source.suffix == ".json":
        return load_fastddrive(source, recipe)
    return load_shards(source, split, recipe, progress)
