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
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from blockplan.model.planner_model import PlannerModel
from blockplan.train.distill import ChunkDiffusionModule
from blockplan.train.forcing import ChunkNoiseLayout, draw_chunk_noise
from blockplan.train.robot_examples import RobotExamples, RobotRecipe
from blockplan.train.trainer import TrainConfig, TrainError, init_weights, make_optimizer

TEACHER_DIR = "teacher"
BEST_DIR = "best"
METRICS_FILE = "metrics.jsonl"
MODEL_CARD = "MODEL_CARD.md"
TEACHER, STUDENT = 0, 1  # phase index in the noise seed
VALIDATION_STREAM = 1_000_003


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

    def __post_init__(self) -> None:
        if self.teacher_steps < 1 or self.student_steps < 1:
            raise TrainError(
                f"teacher_steps={self.teacher_steps}, student_steps={self.student_steps}: "
                "must be >= 1"
            )
        if not self.scene_weight >= 0:
            raise TrainError(f"scene_weight={self.scene_weight} must be >= 0")

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
    ) -> None:
        if len(train_set) < config.batch_size:
            raise TrainError(
                f"{len(train_set)} training samples cannot fill one batch of {config.batch_size}"
            )
        self.recipe, self.train_set, self.val_set = recipe, train_set, val_set
        self.out, self.config = Path(out_dir), config
        self.device = torch.device(device)
        self.progress, self.command, self.data = progress, command, data
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

    # ---- batches -------------------------------------------------------------------------

    def inputs(
        self, data: RobotExamples, indices: list[int], rng: np.random.Generator, forcing: bool
    ) -> dict[str, torch.Tensor]:
        batch = data.batch(indices, scene=self.scene_probe)
        noisy, masks = draw_chunk_noise(
            self.layout, batch["answer_ids"].numpy(), self.mask_id, rng, forcing
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
                self.log({"event": "stopped_early", "phase": name, "steps_done": step,
                          "max_s": max_s})  # fmt: skip
                break
            epoch, k = divmod(step, per_epoch)
            indices = self.order(phase, epoch)[k * B : (k + 1) * B].tolist()
            rng = np.random.default_rng([self.config.seed, phase, step])
            batch = self.inputs(self.train_set, indices, rng, forcing=teacher is not None)
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
            from blockplan.model.weights import load_pretrained

            model = load_pretrained(self.out / TEACHER_DIR).to(self.device)
            teacher = ChunkDiffusionModule(model, self.recipe, "bidirectional").to(self.device)
            teacher.eval()
            self.records["teacher"] = previous
            self.log({"event": "resumed", "teacher": str(self.out / TEACHER_DIR)})
        else:
            (self.out / METRICS_FILE).unlink(missing_ok=True)
            torch.manual_seed(self.config.seed)
            if init_from is not None:  # fine-tuning: the teacher starts from these weights
                from blockplan.model.weights import load_pretrained

                model = load_pretrained(init_from).train()
                if model.config.to_dict() != self.recipe.model_config.to_dict():
                    raise TrainError(f"--init-from {init_from}: its config differs from the run's")
                self.log({"event": "init_from", "model": str(init_from)})
                self.records["init_from"] = str(init_from)
            else:
                model = PlannerModel(self.recipe.model_config)
                init_weights(model)
            model.to(self.device)
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
        path = self.out / METRICS_FILE
        if not (self.out / TEACHER_DIR / "config.json").is_file() or not path.is_file():
            return None
        found = None
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("event") == "teacher_done":
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
        return (f"{record['steps']} steps (the phase's time budget stopped it; "
                f"{record['planned_steps']} were planned)")  # fmt: skip
    return f"{record['steps']} steps"


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
        f"clip {cfg.grad_clip}, batch {cfg.batch_size}, seed {cfg.seed}.",
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
