"""`blockplan train --embodiment robot`: the two phases of the robot recipe
(docs/ALGORITHMS.md §8), in one process.

1. teacher: a fresh model, bidirectional over the whole chunk, trained with the plain
   masked-diffusion loss (`distill.ChunkDiffusionModule.diffusion_loss`);
2. student: initialised from the teacher, block-causal, trained with diffusion-forcing noise
   and the KL to the frozen teacher at the masked positions (asymmetric distillation).

Each phase uses AdamW with linear warm-up and cosine decay (`trainer.TrainConfig.lr_at`) and
gradient clipping. The noise of step s of phase p comes from `default_rng([seed, p, s])`.

OUT/ holds `metrics.jsonl` (one JSON object per logged step, per validation and at the end),
`teacher/` (the teacher's model folder) and `best/` (the student: the model folder to deploy,
with MODEL_CARD.md, which records both phases).
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm import tqdm

from blockplan.model.planner_model import PlannerModel
from blockplan.train.distill import SCENE_CENTRE, SCENE_SCALE, ChunkDiffusionModule
from blockplan.train.forcing import ChunkNoiseLayout, draw_chunk_noise
from blockplan.train.probe import probe_loss
from blockplan.train.robot_examples import RobotExamples, RobotRecipe
from blockplan.train.trainer import TrainConfig, TrainError, init_weights, make_optimizer

TEACHER_DIR = "teacher"
BEST_DIR = "best"
METRICS_FILE = "metrics.jsonl"
MODEL_CARD = "MODEL_CARD.md"
TEACHER, STUDENT, TOWER = 0, 1, 2  # phase index in the noise seed
VALIDATION_STREAM = 1_000_003
# what reads the image in the encoder; the projections of its tokens stay trainable
PERCEPTION = ("stages.", "keypoint_conv.", "keypoint_log_temperature", "scene_head.")

if TYPE_CHECKING:
    from blockplan.sim.scene_frames import SceneFrames


def _has_scene(model: PlannerModel) -> bool:
    """Whether the vision tower has a scene head (pretrained by a tower phase)."""
    return any(
        name.startswith("scene_head.") for name, _ in model.visual.encoder.named_parameters()
    )


def freeze_perception(model: PlannerModel) -> None:
    """Stop training what reads the image (convolutions, keypoint maps, scene head)."""
    for name, p in model.visual.encoder.named_parameters():
        if name.startswith(PERCEPTION):
            p.requires_grad_(False)


@torch.no_grad()
def scene_errors(model: PlannerModel, data: RobotExamples, limit: int = 512) -> dict[str, float]:
    """RMS error (cm) of the scene head's object, goal and hand positions on the newest frame
    of each camera, over (at most `limit` evenly spaced) samples with a known scene."""
    known = np.nonzero(np.isfinite(data.scene).all(axis=1))[0]
    if len(known) == 0:
        return {}
    known = known[np.linspace(0, len(known) - 1, min(limit, len(known))).astype(int)]
    T = model.config.num_frames
    names = model.config.camera_names
    newest = [k * T + T - 1 for k in range(len(names))]
    tower = model.visual
    scale = torch.tensor(SCENE_SCALE)
    centre = torch.tensor(SCENE_CENTRE)
    out: dict[str, float] = {}
    squares = torch.zeros(len(names), 9)
    for start in range(0, len(known), 64):
        idx = known[start : start + 64]
        images = torch.from_numpy(data.images[idx][:, newest])  # (B, K, H, W, 3)
        B, K = images.shape[:2]
        param = next(tower.parameters())
        pixels = tower.preprocess(images.flatten(0, 1)).to(param.device)
        _, scene = tower.encoder.tokens_and_scene(pixels.to(param.dtype))
        found = scene.reshape(B, K, -1).float().cpu() * scale + centre  # (B, K, 9) world
        truth = torch.from_numpy(data.scene[idx]).float()[:, None]
        squares += ((found - truth) ** 2).sum(0)
    rms = (squares / len(known)).reshape(len(names), 3, 3).mean(-1).sqrt() * 100.0  # cm
    for k, camera in enumerate(names):
        for j, what in enumerate(("object", "goal", "hand")):
            out[f"{camera}_{what}_cm"] = float(rms[k, j])
    return out


@dataclass(frozen=True)
class RobotTrainConfig:
    teacher_steps: int
    student_steps: int
    batch_size: int = 8
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 50
    min_lr_ratio: float = 0.05
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 5
    val_samples: int = 48
    eval_samples: int = 8  # validation samples decoded with the planner at the end (0: none)
    # Wall-clock budget of each phase in seconds (None: none): a phase that reaches it stops
    # at that step (recorded as `stopped_early` with the steps done; the schedule is not
    # compressed).
    teacher_max_s: float | None = None
    student_max_s: float | None = None
    # Weight of the training-only scene probe's loss (object and goal positions from the
    # newest visual tokens; train/distill.py) in both phases; 0 = no probe.
    scene_weight: float = 0.0
    # Tower pretraining (phase 0, models with a scene token, `tower_set` given): the vision
    # encoder and its scene head learn the scene targets of the scene frames
    # (sim/scene_frames.py) for `tower_steps` steps of `tower_batch` frames; with
    # `tower_freeze` what reads the image (convolutions, keypoints, scene head) stays fixed
    # afterwards, so the demonstrations' few layouts cannot be learned by heart.
    # Share of the samples masked whole (both phases): a decode starts from a fully masked
    # chunk, whose first values only the context can give; plain draws rarely mask it all.
    full_mask_share: float = 0.0
    tower_steps: int = 0
    tower_batch: int = 32
    tower_max_s: float | None = None
    tower_freeze: bool = True

    def __post_init__(self) -> None:
        if self.teacher_steps < 1 or self.student_steps < 1:
            raise TrainError(
                f"teacher_steps={self.teacher_steps}, student_steps={self.student_steps}: "
                "must be >= 1"
            )
        if not self.scene_weight >= 0:
            raise TrainError(f"scene_weight={self.scene_weight} must be >= 0")
        if not 0 <= self.full_mask_share <= 1:
            raise TrainError(f"full_mask_share={self.full_mask_share} must be in [0, 1]")
        if self.tower_steps < 0 or self.tower_batch < 1:
            raise TrainError(
                f"tower_steps={self.tower_steps}, tower_batch={self.tower_batch}: must be "
                ">= 0 and >= 1"
            )

    def phase(self, steps: int) -> TrainConfig:
        """The optimizer schedule of one phase."""
        return TrainConfig(
            steps=steps,
            batch_size=self.batch_size,
            lr=self.lr,
            weight_decay=self.weight_decay,
            warmup_steps=min(self.warmup_steps, steps),
            min_lr_ratio=self.min_lr_ratio,
            grad_clip=self.grad_clip,
            seed=self.seed,
        )


class RobotTrainer:
    def __init__(
        self,
        recipe: RobotRecipe,
        train_set: RobotExamples,
        out_dir: str | Path,
        config: RobotTrainConfig,
        val_set: RobotExamples | None = None,
        device: str | torch.device = "cpu",
        progress: bool = True,
        command: str = "",
        data: str = "",
        tower_set: SceneFrames | None = None,
        tower_data: str = "",
    ) -> None:
        if len(train_set) < config.batch_size:
            raise TrainError(
                f"{len(train_set)} training samples cannot fill one batch of {config.batch_size}"
            )
        self.recipe, self.train_set, self.val_set = recipe, train_set, val_set
        self.out, self.config = Path(out_dir), config
        self.device = torch.device(device)
        self.progress, self.command, self.data = progress, command, data
        self.tower_set, self.tower_data = tower_set, tower_data
        self.layout = ChunkNoiseLayout.from_scaffold(recipe.scaffold)
        self.mask_id = recipe.scaffold.mask_id
        self.records: dict[str, dict[str, Any]] = {}
        self.scene_probe = config.scene_weight > 0
        if recipe.model_config.vision.scene and not self.scene_probe:
            raise TrainError(
                "the model has a scene token (--vision-scene-token): its head learns from the "
                "scene targets, set --scene-weight > 0"
            )
        if self.scene_probe and not np.isfinite(train_set.scene[:, :6]).all(axis=1).any():
            raise TrainError(
                "scene_weight > 0 but no training step records the scene (a data set built "
                "from bags without /sim/object/position and /sim/goal/position: regenerate it)"
            )
        if (tower_set is not None) != (config.tower_steps > 0):
            raise TrainError("tower pretraining needs both scene frames and tower_steps > 0")
        if tower_set is not None and not recipe.model_config.vision.scene:
            raise TrainError(
                "tower pretraining trains the scene head: the model needs a scene token "
                "(--vision-scene-token)"
            )

    # ---- batches -------------------------------------------------------------------------

    def inputs(
        self,
        data: RobotExamples,
        indices: list[int],
        rng: np.random.Generator,
        forcing: bool,
        full_share: float = 0.0,
    ) -> dict[str, torch.Tensor]:
        batch = data.batch(indices, scene=self.scene_probe)
        noisy, masks = draw_chunk_noise(
            self.layout, batch["answer_ids"].numpy(), self.mask_id, rng, forcing, full_share
        )
        batch["noisy_ids"], batch["masks"] = torch.from_numpy(noisy), torch.from_numpy(masks)
        return {k: v.to(self.device) for k, v in batch.items()}

    def order(self, phase: int, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.config.seed, phase, epoch, 7]).permutation(
            len(self.train_set)
        )

    # ---- phases --------------------------------------------------------------------------

    def run_phase(
        self,
        phase: int,
        module: ChunkDiffusionModule,
        steps: int,
        teacher: ChunkDiffusionModule | None = None,
        max_s: float | None = None,
    ) -> dict[str, float]:
        """Train `module` for `steps` (or until `max_s` seconds have passed): the plain loss
        (teacher is None) or distillation."""
        cfg = self.config.phase(steps)
        name = "teacher" if teacher is None else "student"
        optimizer = make_optimizer(module, cfg)
        B = cfg.batch_size
        per_epoch = len(self.train_set) // B
        module.train()
        record: dict[str, float] = {}
        bar = tqdm(total=steps, desc=f"train {name}", unit="step", disable=not self.progress)
        started = time.monotonic()
        done, stopped = 0, False
        for step in range(steps):
            if max_s is not None and step > 0 and time.monotonic() - started > max_s:
                stopped = True
                self.log(
                    {"event": "stopped_early", "phase": name, "steps_done": step, "max_s": max_s}
                )
                break
            epoch, k = divmod(step, per_epoch)
            indices = self.order(phase, epoch)[k * B : (k + 1) * B].tolist()
            rng = np.random.default_rng([self.config.seed, phase, step])
            batch = self.inputs(
                self.train_set,
                indices,
                rng,
                forcing=teacher is not None,
                full_share=self.config.full_mask_share,
            )
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr_at(step)
            out = (
                module.diffusion_loss(batch)
                if teacher is None
                else module.distillation_loss(batch, teacher)
            )
            loss = out["loss"]
            if "scene" in out:
                loss = loss + self.config.scene_weight * out["scene"]
            if not torch.isfinite(loss):
                raise TrainError(f"{name} step {step}: loss is {float(loss)}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.grad_clip)
            optimizer.step()
            record = {k: float(v.detach()) for k, v in out.items()}
            done = step + 1
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            if (step + 1) % self.config.log_every == 0 or step + 1 == steps:
                entry = {"event": "train", "phase": name, "step": step + 1}
                entry.update(lr=cfg.lr_at(step), grad_norm=float(grad_norm))
                self.log({**entry, "elapsed_s": time.monotonic() - started, **record})
        bar.close()
        module.eval()
        val = self.validate(module, teacher)
        if val:
            self.log({"event": "validate", "phase": name, **val})
        out = {**record, **val, "steps": done, "planned_steps": steps}
        return {**out, "stopped_early": stopped, "seconds": time.monotonic() - started}

    def run_tower_phase(self, model: PlannerModel) -> dict[str, Any]:
        """Phase 0: the vision encoder and its scene head on the scene frames (every camera's
        prediction against the frame's scene), AdamW with the phases' schedule."""
        cfg = self.config
        frames = self.tower_set
        assert frames is not None
        encoder, tower = model.visual.encoder, model.visual
        schedule = cfg.phase(cfg.tower_steps)
        optimizer = make_optimizer(encoder, schedule)
        centre = torch.tensor(SCENE_CENTRE, device=self.device)
        scale = torch.tensor(SCENE_SCALE, device=self.device)
        B = cfg.tower_batch
        per_epoch = max(len(frames) // B, 1)
        model.train()
        started, done, stopped, loss = time.monotonic(), 0, False, torch.zeros(())
        bar = tqdm(
            total=cfg.tower_steps, desc="train tower", unit="step", disable=not self.progress
        )
        for step in range(cfg.tower_steps):
            elapsed = time.monotonic() - started
            if cfg.tower_max_s is not None and step > 0 and elapsed > cfg.tower_max_s:
                stopped = True
                self.log(
                    {
                        "event": "stopped_early",
                        "phase": "tower",
                        "steps_done": step,
                        "max_s": cfg.tower_max_s,
                    }
                )
                break
            epoch, k = divmod(step, per_epoch)
            order = np.random.default_rng([cfg.seed, TOWER, epoch, 7]).permutation(len(frames))
            idx = np.sort(order[k * B : (k + 1) * B])
            images = torch.from_numpy(frames.images[idx]).to(self.device)  # (B, K, H, W, 3)
            target = (torch.from_numpy(frames.scene[idx]).to(self.device) - centre) / scale
            n, K = images.shape[:2]
            _, scene = encoder.tokens_and_scene(tower.preprocess(images.flatten(0, 1)))
            loss = probe_loss(scene.reshape(n, K, -1), target[:, None].expand(n, K, -1))
            for group in optimizer.param_groups:
                group["lr"] = schedule.lr_at(step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), schedule.grad_clip)
            optimizer.step()
            done = step + 1
            bar.update(1)
            if done % cfg.log_every == 0 or done == cfg.tower_steps:
                self.log(
                    {
                        "event": "train",
                        "phase": "tower",
                        "step": done,
                        "lr": schedule.lr_at(step),
                        "scene": loss.item(),
                        "elapsed_s": time.monotonic() - started,
                    }
                )
        bar.close()
        model.eval()
        layouts = len(np.unique(frames.task * (1 << 32) + frames.seed))  # (task, seed) pairs
        record: dict[str, Any] = {
            "scene": loss.item(),
            "steps": done,
            "planned_steps": cfg.tower_steps,
            "frames": len(frames),
            "layouts": layouts,
            "stopped_early": stopped,
            "seconds": time.monotonic() - started,
        }
        if self.val_set is not None:
            record |= {f"val/{k}": v for k, v in scene_errors(model, self.val_set).items()}
        if cfg.tower_freeze:
            freeze_perception(model)
        return record

    @torch.no_grad()
    def validate(
        self, module: ChunkDiffusionModule, teacher: ChunkDiffusionModule | None
    ) -> dict[str, float]:
        """Mean losses over the first `val_samples` validation samples, with fixed noise of
        the phase's kind (plain for the teacher, diffusion forcing for the student)."""
        if self.val_set is None or self.config.val_samples < 1:
            return {}
        n = min(len(self.val_set), self.config.val_samples)
        rng = np.random.default_rng([self.config.seed, VALIDATION_STREAM])
        sums: dict[str, float] = {}
        B = self.config.batch_size
        for start in range(0, n, B):
            idx = list(range(start, min(start + B, n)))
            batch = self.inputs(self.val_set, idx, rng, forcing=teacher is not None)
            out = (
                module.diffusion_loss(batch)
                if teacher is None
                else module.distillation_loss(batch, teacher)
            )
            for k, v in out.items():
                sums[k] = sums.get(k, 0.0) + float(v) * len(idx)
        return {f"val/{k}": v / n for k, v in sums.items()}

    def fit(self, resume: bool = False, init_from: str | Path | None = None) -> dict[str, Any]:
        """Both phases; writes OUT/teacher, OUT/best (with the model card) and the log.
        resume: when OUT/teacher holds a finished teacher (its record in the log), skip the
        teacher phase and distil from it. init_from: a model folder of the same config the
        teacher phase starts from (fine-tuning) instead of a fresh initialisation."""
        self.out.mkdir(parents=True, exist_ok=True)
        tokenizer_json = self.recipe.tokenizer.to_str()
        previous = self._teacher_record() if resume else None
        if previous is not None:
            from blockplan.model.pretrained import load_pretrained

            model = load_pretrained(self.out / TEACHER_DIR).to(self.device)
            teacher = ChunkDiffusionModule(model, self.recipe, "bidirectional").to(self.device)
            teacher.eval()
            self.records["teacher"] = previous
            tower = self._logged("tower_done")
            if tower is not None:
                self.records["tower"] = tower
            self.log({"event": "resumed", "teacher": str(self.out / TEACHER_DIR)})
        else:
            (self.out / METRICS_FILE).unlink(missing_ok=True)
            torch.manual_seed(self.config.seed)
            if init_from is not None:  # fine-tuning: the teacher starts from these weights
                from blockplan.model.pretrained import load_pretrained

                model = load_pretrained(init_from).train()
                if model.config.to_dict() != self.recipe.model_config.to_dict():
                    raise TrainError(f"--init-from {init_from}: its config differs from the run's")
                self.log({"event": "init_from", "model": str(init_from)})
                self.records["init_from"] = str(init_from)
                if self.config.tower_freeze and self.tower_set is None and _has_scene(model):
                    # a folder whose perception was pretrained (the scene head): it stays as
                    # trained, as it did in the run that made the folder
                    freeze_perception(model)
                    self.records["perception_from"] = str(init_from)
            else:
                model = PlannerModel(self.recipe.model_config)
                init_weights(model)
            model.to(self.device)
            if self.tower_set is not None:
                self.records["tower"] = self.run_tower_phase(model)
                self.log({"event": "tower_done", "record": self.records["tower"]})
            teacher = ChunkDiffusionModule(
                model, self.recipe, "bidirectional", scene_probe=self.scene_probe
            ).to(self.device)
            self.records["teacher"] = self.run_phase(
                TEACHER, teacher, self.config.teacher_steps, max_s=self.config.teacher_max_s
            )
            self.save(model, self.out / TEACHER_DIR, tokenizer_json)
            self.log({"event": "teacher_done", "record": self.records["teacher"]})
        for p in teacher.parameters():
            p.requires_grad_(False)
        student_model = copy.deepcopy(model)
        for p in student_model.parameters():
            p.requires_grad_(True)
        if self.config.tower_freeze and (
            "tower" in self.records or "perception_from" in self.records
        ):
            freeze_perception(student_model)
        student = ChunkDiffusionModule(
            student_model, self.recipe, "block_causal", scene_probe=self.scene_probe
        ).to(self.device)
        if student.scene_head is not None and teacher.scene_head is not None:
            student.scene_head.load_state_dict(teacher.scene_head.state_dict())
        self.records["student"] = self.run_phase(
            STUDENT, student, self.config.student_steps, teacher, self.config.student_max_s
        )
        best = self.save(student_model, self.out / BEST_DIR, tokenizer_json)
        evaluation = self.evaluate(best) if self.config.eval_samples > 0 else {}
        card = model_card(self, evaluation)
        (best / MODEL_CARD).write_text(card)
        from blockplan.model.weights import write_manifest

        write_manifest(best)  # the card is part of the verified folder
        final = {"event": "done", **self.records, "evaluation": evaluation, "model": str(best)}
        self.log(final)
        return final

    def _teacher_record(self) -> dict[str, Any] | None:
        """The finished teacher's record from the log, when OUT/teacher holds it."""
        if not (self.out / TEACHER_DIR / "config.json").is_file():
            return None
        return self._logged("teacher_done")

    def _logged(self, event: str) -> dict[str, Any] | None:
        """The record of the last `event` in the log (None: none)."""
        path = self.out / METRICS_FILE
        if not path.is_file():
            return None
        found = None
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("event") == event:
                found = entry["record"]
        return found

    def save(self, model: PlannerModel, folder: Path, tokenizer_json: str) -> Path:
        if folder.exists():
            shutil.rmtree(folder)
        return copy.deepcopy(model).cpu().save_pretrained(folder, tokenizer_json=tokenizer_json)

    def log(self, record: dict[str, Any]) -> None:
        with (self.out / METRICS_FILE).open("a") as f:
            f.write(json.dumps(record) + "\n")

    # ---- evaluation ------------------------------------------------------------------------

    def evaluate(self, folder: Path) -> dict[str, Any]:
        """Decode the first `eval_samples` validation samples (or training samples, without a
        validation split) with the student: action MAE against the true chunk per strategy,
        forwards per plan, and the MAE of the true chunk's own bin centres (the floor)."""
        from blockplan.config import PlannerConfig
        from blockplan.planner.embodiment import robot_config
        from blockplan.planner.planner import Planner
        from blockplan.schema.action import bin_centres, quantize
        from blockplan.types import CameraFrame, RobotObservation

        data = self.val_set if self.val_set is not None else self.train_set
        mc, schema = self.recipe.model_config, self.recipe.schema
        config = robot_config(PlannerConfig(), mc.camera_names, mc.num_frames)
        planner = Planner.from_folder(folder, config)
        n = min(len(data), self.config.eval_samples)
        out: dict[str, Any] = {"split": "val" if self.val_set is not None else "train"}
        truth = data.actions[:n]
        bins, _ = quantize(truth, schema.action_low, schema.action_high, schema.num_bins)
        floor = bin_centres(bins, schema.action_low, schema.action_high, schema.num_bins)
        out["num_samples"] = n
        out["quantization_mae"] = float(np.abs(floor - truth).mean())
        T = mc.num_frames
        for strategy in ("section_diffusion", "pipelined", "full_diffusion"):
            errors, forwards = [], []
            for i in range(n):
                frames = tuple(
                    CameraFrame(mc.camera_names[j // T], 0, data.images[i, j])
                    for j in range(data.images.shape[1])
                )
                obs = RobotObservation(0, frames, data.proprio[i], str(data.instruction[i]))
                decoded = planner.decode(obs, strategy)
                errors.append(np.abs(decoded.plan.actions - truth[i]).mean())
                forwards.append(decoded.result.num_forwards)
            out[strategy] = {
                "action_mae": float(np.mean(errors)),
                "forwards_per_plan": float(np.mean(forwards)),
            }
        return out


def _steps(record: dict[str, Any]) -> str:
    if record.get("stopped_early"):
        return (
            f"{record['steps']} steps (the phase's time budget stopped it; "
            f"{record['planned_steps']} were planned)"
        )
    return f"{record['steps']} steps"


def _tower_lines(trainer: RobotTrainer) -> list[str]:
    """The card's line on the tower pretraining (none without it)."""
    tower = trainer.records.get("tower")
    if tower is None:
        return []
    cfg = trainer.config
    errors = ", ".join(
        f"{k[4:-3].replace('_', ' ')} {v:.1f} cm" for k, v in tower.items() if k.endswith("_cm")
    )
    return [
        f"0. **Tower** (docs/ALGORITHMS.md §8.4): the vision encoder and its scene head on "
        f"`{trainer.tower_data}` ({tower['frames']} scene frames of {tower['layouts']} "
        f"layouts), {_steps(tower)} of {cfg.tower_batch} frames; last scene loss "
        f"{tower['scene']:.4f}"
        + (f"; on the validation samples (unseen layouts): {errors}" if errors else "")
        + (
            ". Its convolutions, keypoints and scene head then stay fixed."
            if cfg.tower_freeze
            else ". The policy phases keep training it."
        ),
    ]


def _fmt(values: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def model_card(trainer: RobotTrainer, evaluation: dict[str, Any]) -> str:
    """MODEL_CARD.md of the student folder: model, schema, data, both phases, evaluation."""
    recipe, cfg = trainer.recipe, trainer.config
    mc, schema, scaffold = recipe.model_config, recipe.schema, recipe.scaffold
    dc = mc.decoder
    teacher, student = trainer.records["teacher"], trainer.records["student"]
    params = PlannerModel(mc).num_parameters()
    lines = [
        "# Robot policy (blockplan robot embodiment; trained by `blockplan train "
        "--embodiment robot`)",
        "",
        "**Status: written by the training run itself. Check the evaluation below before "
        "using the policy for anything.**",
        "",
        "## Model",
        f"- `blockplan_planner`, embodiment `robot`: a Qwen2-architecture decoder (hidden "
        f"{dc.hidden_size}, {dc.num_hidden_layers} layers, {dc.num_attention_heads} heads / "
        f"{dc.num_key_value_heads} KV heads, vocab {dc.vocab_size} = tokenizer "
        f"{recipe.tokenizer.vocab_size} + {schema.num_bins} bins) and a small CNN vision tower "
        f"({mc.vision.image_height}x{mc.vision.image_width}, {mc.tokens_per_image} tokens per "
        f"image). {params:,} parameters.",
        f"- Cameras {', '.join(mc.camera_names)}, {mc.num_frames} frame(s) each, view-major.",
        f"- Action schema: chunks of H = {schema.horizon} steps x D = {schema.action_dim} "
        f"values, K = {schema.num_bins} bins per value over the training split's "
        f"per-dimension ranges low {_fmt(schema.action_low)}, high {_fmt(schema.action_high)}; "
        f"state S = {schema.proprio_dim} values as bin tokens (low "
        f"{_fmt(schema.proprio_low)}, high {_fmt(schema.proprio_high)}); instruction budget "
        f"{schema.instruction_budget} tokens. The ranges are in `config.json` (`schema`).",
        f"- Block size {mc.block_size} ({mc.block_size // schema.action_dim} step(s) per "
        f"block): {len(scaffold.blocks)} blocks, {len(scaffold)} answer tokens, "
        f"{int(scaffold.is_editable.sum())} of them values. Prompt {len(recipe.template)} "
        "tokens. Finished blocks are cached with block attention (`cache_attention: block`).",
        "",
        "## Data",
        f"`{trainer.data}`: {len(trainer.train_set)} training samples"
        + (f", {len(trainer.val_set)} validation samples" if trainer.val_set else "")
        + f"; {trainer.train_set.num_clipped} training action values fell outside the bin "
        "ranges and were clipped.",
        "",
        "## Training (docs/ALGORITHMS.md §8)",
        *_tower_lines(trainer),
        f"1. **Teacher**: bidirectional attention over the whole chunk; the plain "
        f"masked-diffusion loss (one mask ratio t ~ U(0.001, 1) per sample, cross-entropy at "
        f"the masked values); {_steps(teacher)} from "
        + (
            f"the weights of `{trainer.records['init_from']}`"
            if "init_from" in trainer.records
            else "a fresh initialisation"
        )
        + ". Last "
        f"training loss {teacher['loss']:.4f}"
        + (f", validation {teacher['val/ce']:.4f}" if "val/ce" in teacher else "")
        + ".",
        f"2. **Student** (asymmetric distillation): initialised from the teacher; block-causal "
        f"attention (a block sees the prompt, the earlier blocks and itself); diffusion forcing "
        f"(per sample, the blocks' mask ratios are the sorted values of independent U(0.001, 1) "
        f"draws, so they increase with the block index); loss KL(teacher || student) at the "
        f"masked values, the frozen teacher seeing the same noisy chunk bidirectionally; "
        f"{_steps(student)}. Last training KL {student['kl']:.4f} (student CE to the "
        f"data {student['ce']:.4f})"
        + (f", validation KL {student['val/kl']:.4f}" if "val/kl" in student else "")
        + ".",
        f"- Each phase: AdamW (0.9, 0.95, weight decay {cfg.weight_decay}), peak lr {cfg.lr}, "
        f"{cfg.warmup_steps} warm-up steps (at most the phase's length) then cosine to "
        f"{cfg.min_lr_ratio:.0%}, gradient "
        f"clip {cfg.grad_clip}, batch {cfg.batch_size}, seed {cfg.seed}"
        + (
            f"; in both, {cfg.full_mask_share:.0%} of the training chunks are masked whole "
            "instead (docs/ALGORITHMS.md §8.4)."
            if cfg.full_mask_share
            else "."
        ),
        "",
    ]
    if evaluation:
        lines += [
            f"## Evaluation ({evaluation['num_samples']} {evaluation['split']} samples)",
            "",
            "| strategy | action MAE | forwards per plan |",
            "|---|---|---|",
        ]
        for name in ("section_diffusion", "pipelined", "full_diffusion"):
            e = evaluation[name]
            lines.append(f"| `{name}` | {e['action_mae']:.4f} | {e['forwards_per_plan']:.1f} |")
        lines += [
            "",
            f"The true chunks' own bin centres are {evaluation['quantization_mae']:.4f} off "
            "(the quantization floor). Task success needs a simulator (Robots II).",
            "",
        ]
    lines += [
        "## Reproduce",
        "```",
        trainer.command or "blockplan train --embodiment robot ...",
        "```",
        "",
        "## Training settings",
        "```json",
        json.dumps(asdict(cfg)),
        "```",
        "",
    ]
    return "\n".join(lines)
