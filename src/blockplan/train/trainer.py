"""The training loop: AdamW, linear warm-up + cosine decay, gradient clipping, periodic
validation and checkpoints, resume, deterministic seeds, a progress bar and a JSON-lines log.

Determinism: the model is initialised from `seed`; epoch e visits the samples in the order of
`DistributedSampler(seed=seed).set_epoch(e)` (one process is a group of one); the noise of
step s on rank r comes from `default_rng([seed, s, r])`. So a resumed run continues exactly
where it stopped, and two runs with one seed match.

OUT/ holds `metrics.jsonl` (one JSON object per logged step, validation and the end),
`checkpoint/` (the latest, see checkpoint.py) and `best/` (the model folder with the lowest
validation loss; without validation, the latest).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from tqdm import tqdm

from blockplan.decoding.ngrams import draft_files, text_sections
from blockplan.errors import UserError
from blockplan.model.ego import (
    BESIDE_INPUTS,
    LANE_INPUTS,
    LEAD_INPUTS,
    NUM_COLUMNS,
    ROUTE_INPUTS,
)
from blockplan.model.planner_model import PlannerModel
from blockplan.model.vision import resample_cells
from blockplan.schema import SECTION_NAMES
from blockplan.train.checkpoint import MODEL_DIR, load_checkpoint, save_checkpoint
from blockplan.train.distributed import (
    DistContext,
    all_reduce_mean,
    gather_digests,
    parameter_digest,
)
from blockplan.train.examples import Examples
from blockplan.train.objective import SASDModule, draw_flow_noise, draw_noise
from blockplan.train.recipe import Recipe

CHECKPOINT_DIR = "checkpoint"
BEST_DIR = "best"
METRICS_FILE = "metrics.jsonl"
VALIDATION_STREAM = 1_000_003  # rng stream of the fixed validation noise


class TrainError(UserError, RuntimeError):
    """The run cannot continue (bad settings, diverged, ranks disagree)."""


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int = 8  # per rank
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 5
    save_every: int = 50
    val_samples: int = 48
    max_minutes: float | None = None  # stop (and save) after this much wall time
    # Per scenario, samples whose future leaves the straight line ahead by more than
    # lateral_threshold_m repeat until they are at least this share of the scenario's
    # samples per epoch (0 = the data as it is); see `epoch_pool`.
    lateral_share: float = 0.0
    lateral_threshold_m: float = 1.0
    # Weight of the training-only lane-pose probe's loss next to the planner's (0 = no probe;
    # train/objective.py). Validation's `val/loss`, which picks `best`, stays the planner's.
    lane_pose_weight: float = 0.0
    # Share of samples whose lane pose an ego encoder that reads it sees as unknown (so the
    # model also plans without localisation); drawn per sample from the step's stream.
    lane_pose_dropout: float = 0.25
    # Share of samples whose car ahead an ego encoder that reads it sees as unknown (so the
    # model also plans without a tracker); drawn per sample from the step's stream.
    lead_dropout: float = 0.1
    # Share of samples whose lane count beside, and apart from it whose cars beside, an ego
    # encoder that reads the lanes beside sees as unknown (no map, no tracker).
    beside_dropout: float = 0.1
    # Share of samples whose route ahead an ego encoder that reads it sees as unknown (so
    # the model also plans without a router).
    route_dropout: float = 0.1
    # Weight of the training-only lead probe's loss (the gap to the car ahead in the lane,
    # read from the visual tokens; 0 = no probe; train/probe.py).
    lead_weight: float = 0.0
    # Share of training samples (with a known gap) whose scene token says the true lead
    # targets instead of its head's (teacher forcing, so that the decoder learns to read the
    # token; a model with a scene token only). Validation never forces.
    scene_teacher_share: float = 0.0
    # Share of training samples whose ego history (an ego-encoder model's input) shows the
    # t0 speed held steady: no longitudinal acceleration, past positions at that speed. The
    # planner then has to tell when to brake or speed up from what it sees, not copy its own
    # past braking (the "copycat" shortcut of imitation learning); validation keeps the
    # true history. `steady_history`.
    steady_history_share: float = 0.0
    # Share of training samples whose perception inputs (the lane pose, the car ahead and
    # the lanes beside) an ego encoder that reads them sees as unknown all together, as on a
    # vehicle without those modules: the model then plans from the cameras (and the route).
    # The per-input dropouts above rarely hide all three at once. Validation keeps them.
    perception_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise TrainError(f"steps={self.steps}, batch_size={self.batch_size}: must be >= 1")
        if not self.lr > 0 or self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise TrainError("lr > 0, warmup_steps >= 0, 0 <= min_lr_ratio <= 1")
        if not 0 <= self.lateral_share < 1 or not self.lateral_threshold_m > 0:
            raise TrainError(
                f"lateral_share={self.lateral_share} must be in [0, 1) and "
                f"lateral_threshold_m={self.lateral_threshold_m} > 0"
            )
        if not self.lane_pose_weight >= 0:
            raise TrainError(f"lane_pose_weight={self.lane_pose_weight} must be >= 0")
        if not self.lead_weight >= 0:
            raise TrainError(f"lead_weight={self.lead_weight} must be >= 0")
        for name in (
            "lane_pose_dropout",
            "lead_dropout",
            "beside_dropout",
            "route_dropout",
            "perception_dropout",
        ):
            if not 0 <= getattr(self, name) <= 1:
                raise TrainError(f"{name}={getattr(self, name)} must be in [0, 1]")
        if not 0 <= self.scene_teacher_share <= 1:
            raise TrainError(f"scene_teacher_share={self.scene_teacher_share} must be in [0, 1]")
        if not 0 <= self.steady_history_share <= 1:
            raise TrainError(f"steady_history_share={self.steady_history_share} must be in [0, 1]")

    def lr_at(self, step: int) -> float:
        """Linear warm-up to `lr`, then cosine decay to `min_lr_ratio`·lr at `steps`."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(self.steps - self.warmup_steps, 1)
        progress = min((step - self.warmup_steps) / span, 1.0)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine)


def epoch_pool(
    future_xy: np.ndarray, episode: np.ndarray, share: float, threshold_m: float
) -> np.ndarray:
    """Sample indices for one epoch, lateral samples repeated.

    Lane changes and swerves are rare on a highway (a tenth of the samples) and a model
    trained on the data as it is learns to drive straight ahead in its own frame, also when
    its heading is off the lane's. Per scenario (the part of `episode` before the last
    "-"), samples whose ground-truth future deviates laterally by more than `threshold_m`
    repeat a whole number of times so that they make up at least `share` of that scenario's
    samples (never fewer than once; scenarios already above `share` are unchanged)."""
    n = len(future_xy)
    pool = [np.arange(n)]
    if share <= 0 or n == 0:
        return pool[0]
    lateral = np.abs(np.asarray(future_xy)[:, :, 1]).max(axis=1) > threshold_m
    scenario = np.array([str(e).rsplit("-", 1)[0] for e in episode])
    for name in sorted(set(scenario)):
        mine = scenario == name
        idx = np.flatnonzero(mine & lateral)
        p = len(idx) / int(mine.sum())
        if len(idx) == 0 or p >= share:
            continue
        repeats = int(round(share * (1 - p) / (p * (1 - share))))  # lateral total / once
        pool += [idx] * (repeats - 1)
    return np.concatenate(pool)


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """HF-style init of linear and embedding layers (normal(0, std), zero biases)."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, 0.0, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)


def make_optimizer(module: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW; matrices decay, vectors (norms, biases) do not."""
    decay = [p for p in module.parameters() if p.dim() >= 2]
    other = [p for p in module.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": other, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95))


EGO_INPUT = "ego_encoder.net.0.weight"  # the encoder's input layer, (hidden, rows * 6 [+ 3])
CELL_EMBED = "visual.cell_embed.weight"  # (tokens per image, width), row-major grid cells


def widen_rows(weight: torch.Tensor, extra: int) -> torch.Tensor:
    """The ego encoder's input weights for `extra` more, older history rows (they come
    first in the flattened input) at zero weight."""
    zeros = weight.new_zeros(weight.shape[0], extra * NUM_COLUMNS)
    return torch.cat([zeros, weight], dim=1)


def steady_history(history: torch.Tensor, period_s: float) -> torch.Tensor:
    """Ego histories (B, H, 6) [x, y, vx, vy, ax, ay], oldest first, ending at t0 in the
    ego frame at t0, with the longitudinal columns rewritten as if the t0 speed had been held:
    x = vx0·t at the rows' times t = -(H-1-k)·period, vx = vx0, ax = 0. The lateral columns
    stay as they are."""
    H = history.shape[1]
    t = -period_s * torch.arange(H - 1, -1, -1, dtype=history.dtype)  # (H,)
    v0 = history[:, -1, 2]  # (B,)
    held = history.clone()
    held[:, :, 0] = v0[:, None] * t
    held[:, :, 2] = v0[:, None]
    held[:, :, 4] = 0.0
    return held


def config_differences(theirs: dict, mine: dict, prefix: str = "") -> list[str]:
    """The dotted keys where two config dicts differ (a value, or present in one only)."""
    out = []
    for key in sorted(set(theirs) | set(mine), key=str):
        a, b = theirs.get(key), mine.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def zero_inputs(weight: torch.Tensor, n: int, before_last: int = 0) -> torch.Tensor:
    """An input layer's weights (out, in) with n more inputs at zero weight, at the end or
    before the last `before_last` inputs: the model first computes what it did."""
    cut = weight.shape[1] - before_last
    zeros = weight.new_zeros(weight.shape[0], n)
    return torch.cat([weight[:, :cut], zeros, weight[:, cut:]], dim=1)


class Trainer:
    def __init__(
        self,
        recipe: Recipe,
        train_set: Examples,
        out_dir: str | Path,
        config: TrainConfig,
        ctx: DistContext | None = None,
        val_set: Examples | None = None,
        progress: bool = True,
    ) -> None:
        self.recipe, self.train_set, self.val_set = recipe, train_set, val_set
        self.draft_files: dict[str, str] | None = None  # draft_ngrams.json (decoding/ngrams.py)
        self.out = Path(out_dir)
        self.config = config
        self.ctx = ctx or DistContext()
        self.progress = progress and self.ctx.is_main
        torch.manual_seed(config.seed)
        self.model = PlannerModel(recipe.model_config)
        init_weights(self.model)
        probe, lead = config.lane_pose_weight > 0, config.lead_weight > 0
        self.module = SASDModule(self.model, recipe, lane_probe=probe, lead_probe=lead).to(
            self.ctx.device
        )
        self.optimizer = make_optimizer(self.module, config)
        self.step, self.best_val = 0, math.inf
        encoder = recipe.model_config.ego_encoder
        self.lane_input = encoder is not None and encoder.lane_pose
        self.lead_input = encoder is not None and encoder.lead
        if self.lead_input and not np.isfinite(train_set.lead[:, 0]).any():
            raise TrainError(
                "ego_lead but no training sample has a car ahead with a recorded gap (data "
                "sets written by `blockplan dataset` before the gap was recorded: regenerate "
                "them)"
            )
        self.beside_input = encoder is not None and encoder.beside
        if self.beside_input and not np.isfinite(train_set.beside[:, :, 0]).any():
            raise TrainError(
                "ego_beside but no training sample records the lanes beside (data sets "
                "written by `blockplan dataset` before `lanes_beside` and `beside`: regenerate "
                "them)"
            )
        self.route_input = encoder is not None and encoder.route
        if self.route_input and not np.isfinite(train_set.route_ahead).all(axis=(1, 2)).any():
            raise TrainError(
                "ego_route but no training sample records the route ahead (data sets written "
                "by `blockplan dataset` before `route_ahead`, or bags without /planning/route: "
                "regenerate them)"
            )
        for needed, what in ((probe, "lane_pose_weight > 0"), (self.lane_input, "ego_lane_pose")):
            if needed and not np.isfinite(train_set.lane_pose).all(axis=1).any():
                raise TrainError(
                    f"{what} but no training sample records its lane pose (a data set written "
                    "by `blockplan dataset` before the lane pose was recorded: regenerate it)"
                )
        if recipe.model_config.vision.scene and not lead:
            raise TrainError(
                "the model has a scene token (--vision-scene-token): its head learns the gap "
                "to the car ahead from the data sets' `lead`, set --lead-weight > 0"
            )
        if config.steady_history_share > 0 and encoder is None:
            raise TrainError(
                "steady_history_share > 0 rewrites the ego encoder's history: it needs a model "
                "with one (--ego-tokens N)"
            )
        if config.scene_teacher_share > 0 and not self.module.lead_scene:
            raise TrainError(
                "scene_teacher_share > 0 forces what a scene token says: it needs a model with "
                "one (--vision-scene-token) and --lead-weight > 0"
            )
        if lead and not np.isfinite(train_set.lead[:, 0]).any():
            raise TrainError(
                "lead_weight > 0 but no training sample has a car ahead in its lane with a "
                "recorded gap (data sets written by `blockplan dataset` before the gap was "
                "recorded: regenerate them)"
            )
        self.pool = epoch_pool(
            train_set.future_xy, train_set.episode, config.lateral_share, config.lateral_threshold_m
        )
        self.sampler = DistributedSampler(
            range(len(self.pool)),
            num_replicas=self.ctx.world_size,
            rank=self.ctx.rank,
            shuffle=True,
            seed=config.seed,
            drop_last=True,
        )
        self.steps_per_epoch = len(self.sampler) // config.batch_size
        if self.steps_per_epoch < 1:
            raise TrainError(
                f"{len(self.pool)} training samples over {self.ctx.world_size} ranks cannot fill "
                f"one batch of {config.batch_size}"
            )

    # ---- state -----------------------------------------------------------------------------

    def resume(self) -> bool:
        """Continue from OUT/checkpoint if it exists; returns whether it did."""
        path = self.out / CHECKPOINT_DIR
        if not path.exists():
            return False
        probes = self.module.probes if len(self.module.probes) else None
        state = load_checkpoint(path, self.model, self.optimizer, probes)
        if state["config"]["seed"] != self.config.seed:
            raise TrainError(f"{path}: written with seed {state['config']['seed']}")
        self.step, self.best_val = int(state["step"]), float(state["best_val"])
        return True

    def init_from(self, folder: str | Path) -> None:
        """Start from the weights of a model folder of the same architecture (fine-tuning:
        fresh optimizer and schedule)."""
        from blockplan.model.pretrained import load_pretrained

        source = load_pretrained(folder)
        # A folder written before config.json recorded the frame spacing matches any.
        mine = self.model.config
        if isinstance(source, PlannerModel) and source.config.frame_period_s is None:
            mine = dataclasses.replace(mine, frame_period_s=None)
        # A token-head folder can start a flow-head run: the decoder and vision tower carry
        # over, the head starts from its initialisation.
        fresh_head = (
            isinstance(source, PlannerModel)
            and source.config.trajectory_head == "tokens"
            and mine.trajectory_head == "flow"
        )
        if fresh_head:
            mine = dataclasses.replace(mine, trajectory_head="tokens", flow_head=None)
        # A digit-prompt folder can start an ego-encoder run the same way: everything but
        # the encoder carries over (the prompt loses its history digits, nothing else), and
        # the encoder may read another number of history rows than the digits held.
        fresh_ego = (
            isinstance(source, PlannerModel)
            and source.config.ego_encoder is None
            and mine.ego_encoder is not None
        )
        if fresh_ego:
            rows = source.config.schema.get("num_history", mine.schema.get("num_history"))
            schema = dict(mine.schema) | {"num_history": rows}
            mine = dataclasses.replace(mine, ego_encoder=None, schema=schema)
        # An encoder folder can start a run that reads more (older) history rows: the new
        # rows' input weights start at zero, so the model first computes what it did.
        state = source.state_dict() if isinstance(source, PlannerModel) else {}
        theirs = source.config.ego_encoder if isinstance(source, PlannerModel) else None
        # An encoder folder without the lane pose, or that does not read the scene token, can
        # start a run whose encoder reads it: those inputs (after the history rows, in this
        # order) start at zero weight, the same way. (A folder that reads the scene but not
        # the lane pose cannot: the lane inputs come first.) A folder that reads the car
        # ahead or the lanes beside keeps those inputs last: the new ones go in before them.
        for name, width in (("lane_pose", LANE_INPUTS), ("scene", mine.decoder.hidden_size)):
            if (
                theirs is not None
                and mine.ego_encoder is not None
                and getattr(mine.ego_encoder, name)
                and not getattr(theirs, name)
                and not (name == "lane_pose" and theirs.scene)
            ):
                encoder = dataclasses.replace(mine.ego_encoder, **{name: False})
                mine = dataclasses.replace(mine, ego_encoder=encoder)
                after = (
                    (LEAD_INPUTS if theirs.lead else 0)
                    + (BESIDE_INPUTS if theirs.beside else 0)
                    + (ROUTE_INPUTS if theirs.route else 0)
                )
                widened = zero_inputs(state[EGO_INPUT], width, before_last=after)
                state = dict(state) | {EGO_INPUT: widened}
        # The car ahead, then the lanes beside, then the route ahead come after every other
        # input, so any encoder folder without them can start a run that reads them: each
        # goes in before those of the later ones the folder already reads.
        later = {"lead": ("beside", "route"), "beside": ("route",), "route": ()}
        widths = {"lead": LEAD_INPUTS, "beside": BESIDE_INPUTS, "route": ROUTE_INPUTS}
        for name, width in widths.items():
            if (
                theirs is not None
                and mine.ego_encoder is not None
                and getattr(mine.ego_encoder, name)
                and not getattr(theirs, name)
            ):
                encoder = dataclasses.replace(mine.ego_encoder, **{name: False})
                mine = dataclasses.replace(mine, ego_encoder=encoder)
                after = sum(widths[k] for k in later[name] if getattr(theirs, k))
                widened = zero_inputs(state[EGO_INPUT], width, before_last=after)
                state = dict(state) | {EGO_INPUT: widened}
        if theirs is not None and mine.ego_encoder is not None:
            extra = mine.ego_encoder.rows - theirs.rows
            if extra > 0 and dataclasses.replace(mine.ego_encoder, rows=theirs.rows) == theirs:
                mine = dataclasses.replace(
                    mine,
                    ego_encoder=theirs,
                    schema=dict(mine.schema) | {"num_history": theirs.rows},
                )
                state = dict(state) | {EGO_INPUT: widen_rows(state[EGO_INPUT], extra)}
        # A folder of another input size can start this run's: convolutions do not depend
        # on the image size and the pooling onto the token grid adapts, so every tensor
        # carries over as it is (the tower then sees the finer or coarser image).
        their_vision = source.config.vision if isinstance(source, PlannerModel) else None
        if their_vision is not None:
            size = {
                "image_height": their_vision.image_height,
                "image_width": their_vision.image_width,
            }
            mine = dataclasses.replace(mine, vision=dataclasses.replace(mine.vision, **size))
        # A folder of another visual token grid can start this run's grid: the encoder and
        # the projector work per cell, so they carry over, and the cell embeddings are
        # resampled onto the new grid (a cell gets the embedding of the place it covers).
        their_vision = source.config.vision if isinstance(source, PlannerModel) else None
        if (
            their_vision is not None
            and their_vision.grid != mine.vision.grid
            and dataclasses.replace(mine.vision, grid=their_vision.grid) == their_vision
        ):
            grid = mine.vision.grid
            mine = dataclasses.replace(mine, vision=their_vision)
            cells = resample_cells(state[CELL_EMBED], their_vision.grid, grid)
            state = dict(state) | {CELL_EMBED: cells}
        # A folder without keypoints and a scene token can start a run with them: the new
        # parts of the tower (keypoint maps, scene head, their tokens' projections and cell
        # embeddings) start from their initialisation, everything else carries over.
        fresh_tower = (
            their_vision is not None
            and (mine.vision.keypoints or mine.vision.scene)
            and dataclasses.replace(mine.vision, keypoints=0, scene=0, scene_reads="cells")
            == their_vision
        )
        if fresh_tower:
            mine = dataclasses.replace(mine, vision=their_vision)
            theirs_cells, my_cells = state[CELL_EMBED], self.model.state_dict()[CELL_EMBED]
            cells = torch.cat([theirs_cells, my_cells[theirs_cells.shape[0] :]])
            state = dict(state) | {CELL_EMBED: cells}
        if not isinstance(source, PlannerModel):
            raise TrainError(f"{folder}: not a planner of this run's architecture and schema")
        if source.config != mine:
            differ = config_differences(source.config.to_dict(), mine.to_dict())
            raise TrainError(
                f"{folder}: not a planner of this run's architecture and schema (config.json "
                f"differs at {', '.join(differ)}; the folder's own config.json says which "
                "training flags it was made with)"
            )
        fresh = tuple(
            p
            for p, new in (
                ("flow_head.", fresh_head),
                ("ego_encoder.", fresh_ego),
                ("visual.encoder.keypoint", fresh_tower),
                ("visual.encoder.scene", fresh_tower),
            )
            if new
        )
        result = self.model.load_state_dict(state, strict=not fresh)
        if fresh and (
            result.unexpected_keys or any(not k.startswith(fresh) for k in result.missing_keys)
        ):
            raise TrainError(f"{folder}: tensors do not match: {result}")

    def save(self) -> None:
        if not self.ctx.is_main:
            return
        state = {"step": self.step, "best_val": self.best_val, "config": asdict(self.config)}
        tokenizer_json = self.recipe.tokenizer.to_str()
        if self.draft_files is None:  # the training answers' n-gram table, made once
            r = self.recipe
            sections = text_sections(r.scaffold, r.schema, r.tokenizer)
            # only the answers whose text is a label (a bag's sample has none)
            columns = [SECTION_NAMES.index(name) for name in sections]
            labelled = self.train_set.known_sections[:, columns].all(axis=1)
            answers = self.train_set.answer_ids[labelled]
            self.draft_files = draft_files(r.scaffold, answers, sections)
        save_checkpoint(
            self.out / CHECKPOINT_DIR,
            self.model,
            tokenizer_json,
            self.optimizer,
            state,
            probe=self.module.probes if len(self.module.probes) else None,
            extra_files=self.draft_files,
        )

    def log(self, record: dict[str, Any]) -> None:
        if self.ctx.is_main:
            with (self.out / METRICS_FILE).open("a") as f:
                f.write(json.dumps(record) + "\n")

    # ---- steps -----------------------------------------------------------------------------

    def batch_indices(self, step: int) -> list[int]:
        epoch, k = divmod(step, self.steps_per_epoch)
        self.sampler.set_epoch(epoch)
        order = list(self.sampler)
        B = self.config.batch_size
        return [int(self.pool[i]) for i in order[k * B : (k + 1) * B]]

    def inputs(
        self, data: Examples, indices: list[int], rng: np.random.Generator, teach: bool = True
    ) -> dict:
        batch = data.batch(
            indices,
            lane_pose=self.module.lane_head is not None,
            lead=self.config.lead_weight > 0,
        )
        noisy, masks = draw_noise(
            self.module.layout, batch["answer_ids"].numpy(), self.module.mask_id, rng
        )
        batch["noisy_ids"] = torch.from_numpy(noisy)
        batch["noisy_masks"] = torch.from_numpy(masks)
        if self.module.flow_head is not None:  # after the SASD noise: token runs draw as before
            x0, tau = draw_flow_noise(len(indices), rng)
            batch["flow_noise"], batch["flow_tau"] = torch.from_numpy(x0), torch.from_numpy(tau)
            future = data.future_xy[np.asarray(indices, dtype=np.int64)]
            batch["future_xy"] = torch.from_numpy(future.astype(np.float32))
        if self.lane_input:  # after the other draws: runs without it draw as before
            pose = data.lane_pose[np.asarray(indices, dtype=np.int64)].astype(np.float64)
            pose[rng.random(len(indices)) < self.config.lane_pose_dropout] = np.nan
            batch["lane_input"] = torch.from_numpy(pose)
        if self.lead_input:  # after the lane draw: runs without it draw as before
            ahead = data.lead[np.asarray(indices, dtype=np.int64)].astype(np.float64)
            ahead[rng.random(len(indices)) < self.config.lead_dropout] = np.nan
            batch["lead_input"] = torch.from_numpy(ahead)
        if self.beside_input:  # after the lead draw: runs without it draw as before
            lanes = data.beside[np.asarray(indices, dtype=np.int64)].astype(np.float64)
            drop = rng.random((len(indices), 2)) < self.config.beside_dropout
            lanes[drop[:, 0], :, 0] = np.nan  # the lane count (the map)
            lanes[drop[:, 1], :, 1:] = np.nan  # the cars (the tracker)
            batch["beside_input"] = torch.from_numpy(lanes)
        if self.route_input:  # after the beside draw: runs without it draw as before
            route = data.route_ahead[np.asarray(indices, dtype=np.int64)].astype(np.float64)
            route[rng.random(len(indices)) < self.config.route_dropout] = np.nan
            batch["route_input"] = torch.from_numpy(route)
        if teach and self.config.scene_teacher_share > 0:  # last: other runs draw as before
            told = rng.random(len(indices)) < self.config.scene_teacher_share
            batch["lead_told"] = torch.from_numpy(told)
        if teach and self.config.steady_history_share > 0:
            steady = rng.random(len(indices)) < self.config.steady_history_share
            period = self.recipe.schema.history_period_s
            held = steady_history(batch["ego_history"], period)
            batch["ego_history"] = torch.where(
                torch.from_numpy(steady)[:, None, None], held, batch["ego_history"]
            )
        if teach and self.config.perception_dropout > 0:  # last: other runs draw as before
            blind = torch.from_numpy(rng.random(len(indices)) < self.config.perception_dropout)
            for key in ("lane_input", "lead_input", "beside_input"):
                if key in batch:
                    hidden = blind.reshape(-1, *[1] * (batch[key].dim() - 1))
                    batch[key] = torch.where(hidden, torch.nan, batch[key])
        return {k: v.to(self.ctx.device) for k, v in batch.items()}

    def train_step(self, runner: nn.Module) -> dict[str, float]:
        rng = np.random.default_rng([self.config.seed, self.step, self.ctx.rank])
        lr = self.config.lr_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        out = runner(**self.inputs(self.train_set, self.batch_indices(self.step), rng))
        loss = out["loss"]
        if "lane_pose" in out:
            loss = loss + self.config.lane_pose_weight * out["lane_pose"]
        if "lead" in out:
            loss = loss + self.config.lead_weight * out["lead"]
        if not torch.isfinite(loss):
            raise TrainError(f"step {self.step}: loss is {float(loss)}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.step += 1
        record = {k: float(all_reduce_mean(self.ctx, v.detach())) for k, v in out.items()}
        return {**record, "lr": lr, "grad_norm": float(grad_norm)}

    @torch.no_grad()
    def validate(self) -> dict[str, float] | None:
        """Mean losses over the first `val_samples` validation samples, fixed noise."""
        if self.val_set is None or not self.ctx.is_main:
            return None
        n = min(len(self.val_set), self.config.val_samples)
        rng = np.random.default_rng([self.config.seed, VALIDATION_STREAM])
        sums: dict[str, float] = {}
        B = self.config.batch_size
        for start in range(0, n, B):
            idx = list(range(start, min(start + B, n)))
            out = self.module(**self.inputs(self.val_set, idx, rng, teach=False))
            for k, v in out.items():
                sums[k] = sums.get(k, 0.0) + float(v) * len(idx)
        return {f"val/{k}": v / n for k, v in sums.items()}

    def checkpoint(self) -> None:
        """Validate, save the latest checkpoint, and keep the best model folder."""
        val = self.validate()
        if self.ctx.is_main:
            val_loss = val["val/loss"] if val else -float(self.step)
            is_best = val_loss < self.best_val
            if is_best:
                self.best_val = val_loss
            self.save()
            if is_best:
                best = self.out / BEST_DIR
                if best.exists():
                    shutil.rmtree(best)
                shutil.copytree(self.out / CHECKPOINT_DIR / MODEL_DIR, best)
            self.log({"event": "checkpoint", "step": self.step, "is_best": is_best, **(val or {})})

    def should_stop(self, started: float) -> bool:
        """The wall-time limit, decided by rank 0 for the whole group."""
        if self.config.max_minutes is None:
            return False
        flag = torch.tensor(float(time.monotonic() - started > 60.0 * self.config.max_minutes))
        if self.ctx.is_distributed:
            torch.distributed.broadcast(flag, src=0)
        return bool(flag.item())

    def fit(self, until: int | None = None) -> dict[str, Any]:
        """Train to `config.steps` (or the time limit, or step `until`, saving there, as an
        interruption would); returns the final log record."""
        self.out.mkdir(parents=True, exist_ok=True)
        cfg, ctx = self.config, self.ctx
        runner: nn.Module = self.module
        if ctx.is_distributed:
            ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            runner = DistributedDataParallel(self.module, device_ids=ids)
        self.module.train()
        bar = tqdm(
            total=cfg.steps, initial=self.step, desc="train", unit="step", disable=not self.progress
        )
        started = time.monotonic()
        seen, t_log = 0, time.monotonic()
        last = cfg.steps if until is None else min(until, cfg.steps)
        while self.step < last:
            record = self.train_step(runner)
            seen += cfg.batch_size * ctx.world_size
            bar.update(1)
            key = "flow" if "flow" in record else "ar/trajectory"
            bar.set_postfix(loss=f"{record['loss']:.3f}", traj=f"{record[key]:.3f}")
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                now = time.monotonic()
                self.log(
                    {
                        "event": "train",
                        "step": self.step,
                        "epoch": (self.step - 1) // self.steps_per_epoch,
                        "samples_per_s": seen / max(now - t_log, 1e-9),
                        "elapsed_s": now - started,
                        **record,
                    }
                )
                seen, t_log = 0, now
            stop = self.should_stop(started) or self.step == last
            if self.step % cfg.save_every == 0 or stop:
                self.checkpoint()
            if stop:
                break
        bar.close()
        digests = gather_digests(ctx, parameter_digest(self.module))
        final = {
            "event": "done",
            "step": self.step,
            "best_val": self.best_val,
            "world_size": ctx.world_size,
            "param_digests": digests,
        }
        self.log(final)
        if len(set(digests)) != 1:
            raise TrainError(f"ranks ended with different parameters: {digests}")
        return final
