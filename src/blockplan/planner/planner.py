"""Planner: observation → prompt → visual tokens → decoding strategy → strict parse → Plan.

Stages (each timed into `Plan.timings_ms`): `encode` (images → visual tokens), `prompt`
(render the prompt, build its embeddings), `prefill`, one entry per answer section (or
`full_diffusion`), `post` (strict parsing into the answer and the (N, 5, 2) rollouts).
A parse failure raises the schema's `ScaffoldParseError`; the runtime counts it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from blockplan.backends import create_backend
from blockplan.config import PlannerConfig, package_root
from blockplan.decoding.decode import DecodeOptions, DecodeResult, decode
from blockplan.decoding.device import synchronize
from blockplan.decoding.flow import FlowSampler
from blockplan.decoding.kv_cache import KVCache
from blockplan.decoding.ngrams import read_drafts
from blockplan.model.config import ModelConfigError
from blockplan.model.drafter import Drafter, load_drafter
from blockplan.model.masks import prompt_mask
from blockplan.model.planner_model import PlannerModel, PlannerModelConfig
from blockplan.model.weights import UNVERIFIED, WeightsError
from blockplan.planner.embodiment import answer_format
from blockplan.planner.parts import (
    TORCH_DTYPES,
    PlannerSetupError,
    device_of,
    folder_parts,
    random_parts,
    schema_from,
)
from blockplan.schema import DrivingSchema, PromptLayout, Tokenizer
from blockplan.schema.action import ActionChunk, ActionSchema
from blockplan.schema.codec import write_waypoints
from blockplan.schema.spec import SchemaError
from blockplan.streaming.frame_cache import VisionFeatureCache
from blockplan.streaming.prefill import StreamingPrefill, StreamingStats
from blockplan.types import ActionPlan, DrivingAnswer, Observation, Plan, RobotObservation

if TYPE_CHECKING:
    from blockplan.backends import Backend
    from blockplan.model.qwen2_5_vl.planner_model import QwenPlannerModel


@dataclass(frozen=True)
class DecodedPlan:
    """A plan with what produced it (the bench reads the tokens and counters)."""

    plan: Plan | ActionPlan
    result: DecodeResult
    layout: PromptLayout


class Planner:
    """Turns observations into plans with one model, tokenizer, schema and strategy."""

    def __init__(
        self,
        model: PlannerModel | QwenPlannerModel,
        tokenizer: Tokenizer,
        config: PlannerConfig,
        schema: DrivingSchema | ActionSchema | None = None,
        backend: Backend | None = None,
        folder: Path | None = None,
        weights: str | None = None,
    ) -> None:
        """`backend`: a runner to share (default: the one `config.model.backend` names,
        made here; `folder` is the model folder it may find exported graphs in). `weights`:
        what the weights are, as runs report it ("sha256-verified", "unverified" or
        "random-init"; default: "random-init" without a folder, else "unverified")."""
        mc = model.config
        if config.model.embodiment != mc.embodiment:  # first: it explains the other mismatches
            raise PlannerSetupError(
                f"model.embodiment={config.model.embodiment!r}: the model is a "
                f"{mc.embodiment} model (a robot model runs with params/robot.yaml)"
            )
        if tuple(config.camera_names) != mc.camera_names:
            raise PlannerSetupError(
                f"cameras.names={list(config.camera_names)}: the model was built for "
                f"{list(mc.camera_names)}"
            )
        if config.frame_window.num_frames != mc.num_frames:
            raise PlannerSetupError(
                f"frame_window.num_frames={config.frame_window.num_frames}: the model was "
                f"built for {mc.num_frames}"
            )
        trained_period = mc.frame_period_s  # None: not recorded (Qwen2.5-VL folders)
        if (
            trained_period is not None
            and abs(config.frame_window.frame_period_s - trained_period) > 1e-9
        ):
            raise PlannerSetupError(
                f"frame_window.frame_period_s={config.frame_window.frame_period_s}: the model "
                f"was trained with frames {trained_period} s apart"
            )
        if tokenizer.vocab_size > mc.decoder.vocab_size:
            raise PlannerSetupError(
                f"tokenizer vocab_size={tokenizer.vocab_size} exceeds the model's "
                f"{mc.decoder.vocab_size} embeddings"
            )
        self.config = config
        self.weights = weights or ("random-init" if folder is None else UNVERIFIED)
        self.dtype = TORCH_DTYPES[config.model.dtype]
        self.device = device_of(config)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.tokenizer = tokenizer
        # The embodiment's answer format (planner/embodiment.py): scaffold, prompt, parser.
        embodiment = mc.embodiment
        self.schema = schema or schema_from(mc.schema, embodiment)
        self.format = answer_format(self.schema)
        self.scaffold = self.format.scaffold(tokenizer, mc.block_size)
        self.constraints = self.format.constraints(self.scaffold, tokenizer, mc.decoder.vocab_size)
        self.cache_attention = mc.cache_attention
        # Whether the model's ego encoder reads the lane pose, the car ahead, the lanes beside,
        # the route ahead (the runtime then passes them on).
        encoder = getattr(mc, "ego_encoder", None)
        self.reads_lane_pose = bool(encoder is not None and encoder.lane_pose)
        self.reads_lead = bool(encoder is not None and encoder.lead)
        self.reads_beside = bool(encoder is not None and encoder.beside)
        self.reads_route = bool(encoder is not None and encoder.route)
        template = self.render(None)
        self.prompt_len = len(template)
        # None for our models (positions 0..P-1); Qwen2.5-VL: multimodal RoPE positions
        self.positions = model.prompt_positions(template)
        # (P, P): depends on the layout and the model's visual attention only
        self.prompt_mask = prompt_mask(template, mc.visual_attention)
        max_batch = config.rollouts.num_rollouts
        max_len = self.prompt_len + len(self.scaffold)
        backend_name = resolve_backend(config.model.backend, mc, self.device, self.dtype)
        if not mc.exportable and backend_name != "torch":
            raise PlannerSetupError(
                f"model.backend={config.model.backend!r}: a {type(model).__name__} runs on "
                "the torch backend only"
            )
        self.runner = backend or create_backend(
            backend_name,
            self.model,
            max_len,
            max_batch,
            num_threads=config.model.num_threads,
            folder=folder,
            cuda_graphs=config.model.cuda_graphs,
        )
        # A static-shape runner (model.cuda_graphs, backends/graphs.py) wants a spare slot
        # for its pad rows and records its graphs for this cache before the first plan.
        spare = getattr(self.runner, "spare_slots", 0)
        self.cache = KVCache.for_model(
            mc.decoder, max_len, max_batch, self.dtype, self.device, spare_slots=spare
        )
        if spare:
            self.runner.prepare(self.cache)
        # The last answer (A,): the next plan's first draft (decoding.draft_from_previous).
        self.previous_answer: np.ndarray | None = None
        # The folder's answer n-gram table (decoding.ngram_drafts), verified with the folder.
        self.drafts = read_drafts(folder, self.scaffold, mc.decoder.vocab_size)
        # The DFlash drafter (decoding.drafter; strategy dflash), verified and bound to the
        # decoder; assign `planner.drafter` to use another (a drafter in training).
        self.drafter: Drafter | None = None
        if config.decoding.drafter:
            try:
                self.drafter = load_drafter(
                    drafter_folder(config.decoding.drafter), self.model.decoder
                )
            except (WeightsError, ModelConfigError) as e:
                raise PlannerSetupError(f"decoding.drafter={config.decoding.drafter!r}: {e}") from e
        if config.decoding.strategy == "dflash":
            self.check_dflash()
        # A flow trajectory head (docs/ALGORITHMS.md §7.1): the text sections decode as
        # configured, the head integrates the waypoints over the prefix cache.
        head = getattr(self.model, "flow_head", None)
        self.flow = (
            None
            if head is None
            else FlowSampler(
                head.eval(),
                config.flow.num_steps,
                config.flow.evaluate_steps,
                # a backend that runs the head's exported graph (onnxruntime) offers it
                velocity=getattr(self.runner, "flow_velocity", lambda: None)(),
            )
        )
        # Streaming (streaming/prefill.py): the vision cache is lossless, so on unless "off";
        # the K/V reuse is exact only for `streams_exactly` models, so "auto" keeps it off
        # for the others ("on" opts in to the approximation). It needs a runner that writes
        # the pre-RoPE keys into the cache at any window and past (torch; onnxruntime's
        # dynamic graph), and runs the torch vision tower in parts.
        # Frames are kept while a later window may pick them: up to T periods before the
        # newest frame (the window spans T-1, plus one for the nearest-frame choice).
        # Models that can stream only (`can_stream`; a Qwen2.5-VL prompt attends causally
        # across frames). "on" where it cannot is an error; "auto" is then "off".
        can_stream = mc.can_stream and getattr(self.runner, "streams", self.runner.name == "torch")
        mode = config.frame_window.streaming if can_stream else "off"
        if config.frame_window.streaming == "on" and not can_stream:
            why = (
                f"a {type(model).__name__} cannot stream"
                if not mc.can_stream
                else f"the {self.runner.name} backend cannot stream (static graphs)"
            )
            raise PlannerSetupError(
                f"frame_window.streaming='on': {why}; use 'auto' (streams where it can) or 'off'"
            )
        self.streaming_mode = mode  # the mode in effect
        span_ns = int(mc.num_frames * config.frame_window.frame_period_s * 1e9)
        self.vision_cache = (
            VisionFeatureCache(self.model.visual, mc.num_frames, span_ns) if mode != "off" else None
        )
        self.streamer = (
            StreamingPrefill(
                template,
                len(mc.camera_names),
                mc.num_frames,
                attend_header=mc.visual_attention == "frame_and_header",
                span_ns=span_ns,
            )
            if mode == "on" or (mode == "auto" and mc.streams_exactly)
            else None
        )

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_folder(cls, path: str | Path, config: PlannerConfig | None = None) -> Planner:
        """A planner over a model folder (`parts.folder_parts`): ours, or a
        Qwen2.5-VL block-diffusion checkpoint (default config: Fast-dDrive's 3 cameras)."""
        p = folder_parts(path, config)
        try:
            return cls(p.model, p.tokenizer, p.config, p.schema, folder=p.folder, weights=p.weights)
        except (SchemaError, PlannerSetupError, ModelConfigError) as e:
            # the folder's files do not fit together or the configuration: name them
            where = Path(path) / "config.json"
            text = " ".join(str(e).split())
            if str(Path(path)) in text:
                raise
            raise PlannerSetupError(f"{where} (with tokenizer.json): {text}") from e

    def sibling(self, config: PlannerConfig, backend: Backend | None = None) -> Planner:
        """A planner over the same model, tokenizer, schema, weights and answer n-gram table
        with another `config` (e.g. another N of rollouts; `backend`: a runner to share)."""
        other = Planner(
            self.model, self.tokenizer, config, self.schema, backend, weights=self.weights
        )
        other.drafts = self.drafts
        other.drafter = self.drafter
        return other

    @classmethod
    def random_init(
        cls,
        preset: str = "tiny",
        config: PlannerConfig | None = None,
        seed: int = 0,
        num_layers: int | None = None,
    ) -> Planner:
        """A planner with random weights of a preset size (`parts.random_parts`;
        `num_layers`: a short smoke run of a big shape, `bench --layers`)."""
        p = random_parts(preset, config, seed, num_layers)
        return cls(p.model, p.tokenizer, p.config, p.schema)

    # ---- planning --------------------------------------------------------------------------

    def render(self, observation: Observation | RobotObservation | None) -> PromptLayout:
        return self.format.render(observation, self.tokenizer, self.model.config)

    def plan(self, observation: Observation | RobotObservation) -> Plan | ActionPlan:
        """Plan with the configured strategy (`decoding.strategy`, `rollouts.*`)."""
        return self.decode(observation).plan

    @torch.no_grad()
    def embed(
        self, observation: Observation | RobotObservation, timings: dict[str, float]
    ) -> tuple[torch.Tensor, PromptLayout]:
        """The prompt embeddings (1, P, W) of `observation` and its rendered prompt: the frames
        go through the vision tower (only new frames when the vision cache is on) and are
        spliced into the prompt. Adds the `encode` and `prompt` wall times (ms) to `timings`."""
        t0 = time.perf_counter()
        if self.vision_cache is not None:
            self.check_frames(observation)
            visual = self.vision_cache(observation.frames, self.dtype)  # (K*T, G, W)
        else:
            visual = self.runner.encode_images(self.images(observation))  # (K*T, G, W)
        synchronize(self.device)
        t1 = time.perf_counter()
        layout = self.render(observation)
        ids = torch.tensor(np.asarray(layout.token_ids), dtype=torch.long, device=self.device)
        embeds = self.model.embed_prompt(
            ids, layout.image_spans, visual, **layout.ego_inputs()
        )  # (1, P, W)
        synchronize(self.device)
        timings["encode"] = (t1 - t0) * 1e3
        timings["prompt"] = (time.perf_counter() - t1) * 1e3
        return embeds, layout

    @torch.no_grad()
    def decode(
        self, observation: Observation | RobotObservation, strategy: str | None = None
    ) -> DecodedPlan:
        """Plan with `strategy` (default: the configured one); also return the raw result."""
        options = DecodeOptions.from_config(self.config, strategy)
        options = dataclasses.replace(options, stream_salt=observation.stamp_ns)
        if options.strategy == "dflash":
            self.check_dflash()
        timings: dict[str, float] = {}
        embeds, layout = self.embed(observation, timings)  # (1, P, W)
        ctx_cache = self.cache if options.num_rollouts <= self.cache.max_batch else None
        result = decode(
            self.runner,
            embeds,
            self.prompt_mask,
            self.scaffold,
            options,
            cache=ctx_cache,
            constraints=self.constraints,
            prefill_with=self.streamer.bind(observation.frames) if self.streamer else None,
            positions=self.positions,
            cache_attention=self.cache_attention,
            flow=self.flow,
            draft_hint=self.previous_answer if self.config.decoding.draft_from_previous else None,
            draft_ngrams=self.drafts if self.config.decoding.ngram_drafts else None,
            drafter=self.drafter,
        )
        timings.update(result.timings_ms)
        t3 = time.perf_counter()
        rows = result.tokens
        if result.waypoints is not None:  # the codec writes the flow waypoints into the slots
            rows = np.stack(
                [
                    write_waypoints(row, w, self.scaffold, self.tokenizer, self.schema)[0]
                    for row, w in zip(rows, result.waypoints, strict=True)
                ]
            )
            result = dataclasses.replace(result, tokens=rows)
        self.previous_answer = rows[0].copy()
        answers = [self.parse(row) for row in rows]
        timings["post"] = (time.perf_counter() - t3) * 1e3
        # vehicle: a Plan with (N, 5, 2) rollouts; robot: an ActionPlan with (N, H, D) chunks
        plan = self.format.make_plan(observation.stamp_ns, answers, timings, result.num_forwards)
        return DecodedPlan(plan, result, layout)

    def check_dflash(self) -> None:
        """Raise unless the dflash strategy can run: a drafter, and a backend that returns
        the decoder's hidden states (eager torch)."""
        if self.drafter is None:
            raise PlannerSetupError(
                "decoding.strategy=dflash: needs decoding.drafter (a drafter folder made by "
                "blockplan train-drafter)"
            )
        if self.runner.name != "torch" or self.config.model.cuda_graphs:
            raise PlannerSetupError(
                f"decoding.strategy=dflash: the drafter reads the decoder's hidden states, "
                f"which only the eager torch backend returns (model.backend="
                f"{self.config.model.backend!r}, model.cuda_graphs="
                f"{str(self.config.model.cuda_graphs).lower()})"
            )

    def warmup(self, num_plans: int = 1) -> None:
        """Plan on synthetic inputs so first-call costs (allocation, kernel selection) are
        paid before the first real observation. (The ROS node warms up with
        `loading.warm_up` instead: black frames, then `reset_stream`.)"""
        for i in range(num_plans):
            self.plan(self.format.synthetic(self.config, seed=i))

    def parse(self, tokens: np.ndarray) -> DrivingAnswer | ActionChunk:
        """Strictly parse one answer row; raises `ScaffoldParseError`."""
        return self.format.parse(tokens, self.scaffold, self.tokenizer)

    def reset_stream(self, clear_stats: bool = False) -> None:
        """Forget the streamed frames, cached features and the previous answer: the next plan
        is a full prefill (reason `reset`) drafted cold. `clear_stats`: also zero the
        counters (after a warm-up)."""
        self.previous_answer = None  # an answer of another stream (or of the warm-up)
        if self.streamer is not None:
            self.streamer.reset()
            if clear_stats:
                self.streamer.stats = StreamingStats()
        if self.vision_cache is not None:
            self.vision_cache.clear()
            if clear_stats:
                self.vision_cache.frames_encoded = 0

    def reset(self) -> None:
        """The runtime's reset (`RuntimePlanner`): forget the stream and zero its counters."""
        self.reset_stream(clear_stats=True)

    def streaming_stats(self) -> dict[str, object]:
        """Streaming counters since the last `reset_stream(clear_stats=True)`: the mode, the
        images encoded, and the prefill's streamed ticks, full prefills by reason, frames
        reused and computed (`StreamingStats.as_dict`; None when it does not stream)."""
        return {
            "mode": self.streaming_mode,
            "vision_cache": self.vision_cache is not None,
            "images_encoded": None
            if self.vision_cache is None
            else self.vision_cache.frames_encoded,
            "prefill": None if self.streamer is None else self.streamer.stats.as_dict(),
        }

    def images(self, observation: Observation | RobotObservation) -> torch.Tensor:
        """(K*T, 3, H, W) model-ready images from the view-major frames of `observation`."""
        self.check_frames(observation)
        frames = [f.image for f in observation.frames]
        visual = self.model.visual
        if hasattr(visual, "preprocess_frames"):  # frames of one size in one resize
            images = visual.preprocess_frames(frames)
        else:  # (a Qwen2.5-VL encoder) one by one; a copy: frames may be read-only
            images = torch.cat([visual.preprocess(torch.tensor(f)[None]) for f in frames])
        return images.to(self.device, self.dtype)  # (K*T, 3, H, W)

    def check_frames(self, observation: Observation | RobotObservation) -> None:
        """Raise unless `observation.frames` are the model's K cameras x T frames in
        view-major order."""
        mc = self.model.config
        K, T = len(mc.camera_names), mc.num_frames
        if len(observation.frames) != K * T:
            raise PlannerSetupError(
                f"observation.frames: {len(observation.frames)} frames, the model needs "
                f"{K} cameras x {T} frames"
            )
        for i, frame in enumerate(observation.frames):
            expected = mc.camera_names[i // T]
            if frame.camera != expected:
                raise PlannerSetupError(
                    f"observation.frames[{i}].camera={frame.camera!r}: view-major order "
                    f"expects {expected!r}"
                )


def resolve_backend(
    name: str, config: PlannerModelConfig, device: torch.device, dtype: torch.dtype
) -> str:
    """The backend `model.backend` names; "auto": onnxruntime for a float32 model that
    exports (ours, not Qwen2.5-VL) on the CPU where onnxruntime and onnx are installed (its
    decoder step is measured faster there than eager torch, docs/BENCHMARKS.md), else torch."""
    if name != "auto":
        return name
    runs_on_ort = (
        device.type == "cpu"
        and dtype == torch.float32
        and config.exportable
        and importlib.util.find_spec("onnxruntime") is not None
        and importlib.util.find_spec("onnx") is not None
    )
    return "onnxruntime" if runs_on_ort else "torch"


def drafter_folder(drafter: str) -> Path:
    """`decoding.drafter` as given, or relative to the package root as `model.dir` is (a
    drafter shipped beside the model in an installed share)."""
    given = Path(drafter)
    if given.is_dir() or given.is_absolute():
        return given
    shared = package_root() / drafter
    return shared if shared.is_dir() else given
