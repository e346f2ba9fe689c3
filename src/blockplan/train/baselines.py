"""Open-loop baselines fitted and evaluated on the same split as the model (docs/ALGORITHMS.md §9).

* constant velocity: the ego keeps its ego-frame velocity at t0 for 5 s;
* ego-status MLP: an MLP from the ego history rows and the route command (no images) to the
  five waypoints, fitted on the training split — known to be strong open loop, the bar;
  with `lane_pose`, it also reads the lane pose at t0 (what a model trained with
  `--ego-lane-pose` gets besides the images), the fair bar for such a model; with `lead`,
  also the car ahead (gap, speed), the same inputs an encoder with `lead` gets
  (`model.ego.lead_inputs`), the fair bar for a model trained with `--ego-lead`; with
  `beside`, also the lanes beside as `model.ego.beside_inputs` reads them, the bar for a
  model trained with `--ego-beside`; with `route`, also the route ahead as
  `model.ego.route_inputs` reads it, the bar for a model trained with `--ego-route`.

`EgoMLPPlanner` drives with the ego-status MLP in closed loop (`blockplan closed-loop
--policies ego_mlp --data DATA`): the runtime's observation goes through the same history
rows and features as a data set sample, so the open-loop bar can be driven too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from blockplan.model.ego import beside_inputs, lead_inputs, route_inputs
from blockplan.runtime.planner import baseline_plan
from blockplan.schema import ego_history_array
from blockplan.schema.spec import DrivingSchema
from blockplan.train.examples import Examples
from blockplan.train.recipe import Recipe
from blockplan.trajectory.upsample import WAYPOINT_TIMES_S
from blockplan.types import ROUTE_AHEAD_M, Observation, Plan

WAYPOINT_INDEX = np.arange(3, 20, 4)  # t = 1..5 s in the 4 Hz future


@contextmanager
def single_thread() -> Iterator[None]:
    """Tiny matrices: one thread (several spin-wait against each other on a busy CPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def constant_velocity(data: Examples) -> np.ndarray:
    """(N, 5, 2) waypoints moving with each sample's ego-frame velocity at t0."""
    return WAYPOINT_TIMES_S[None, :, None] * data.velocity[:, None, :]


def ego_features(
    data: Examples,
    num_commands: int,
    lane_pose: bool = False,
    lead: bool = False,
    beside: bool = False,
    route: bool = False,
) -> np.ndarray:
    """(N, F): the flattened ego history and a one-hot route command; with `lane_pose`, the
    lane pose too (zeros where unknown) and a known flag; with `lead`, the car ahead, with
    `beside` the lanes beside, with `route` the route ahead, as the ego encoder reads them."""
    pose = data.lane_pose if lane_pose else None
    ahead = data.lead if lead else None
    lanes = data.beside if beside else None
    path = data.route_ahead if route else None
    return ego_feature_rows(data.ego_history, data.command, num_commands, pose, ahead, lanes, path)


def ego_feature_rows(
    history: np.ndarray,  # (N, num_history, 6) ego history rows (`ego_history_array`)
    command: np.ndarray,  # (N,) route command indices
    num_commands: int,
    lane_pose: np.ndarray | None = None,  # (N, 2), NaN where unknown
    lead: np.ndarray | None = None,  # (N, 2) gap (inf: none), speed; NaN gap where unknown
    beside: np.ndarray | None = None,  # (N, 2, 5) lanes beside; NaN where unknown
    route: np.ndarray | None = None,  # (N, A, 2) route ahead; NaN where unknown
) -> np.ndarray:
    """`ego_features` of arrays: what a data set sample and a runtime observation share."""
    parts = [history.reshape(len(history), -1), np.eye(num_commands)[command]]
    if lane_pose is not None:
        known = np.isfinite(lane_pose).all(axis=1, keepdims=True)
        parts += [np.where(known, lane_pose, 0.0), known.astype(np.float64)]
    if lead is not None:
        ahead = torch.from_numpy(np.asarray(lead, dtype=np.float64))
        parts.append(lead_inputs(ahead, (len(history),)).numpy())
    if beside is not None:
        lanes = torch.from_numpy(np.asarray(beside, dtype=np.float64))
        parts.append(beside_inputs(lanes, (len(history),)).numpy())
    if route is not None:
        ahead_route = torch.from_numpy(np.asarray(route, dtype=np.float64))
        parts.append(route_inputs(ahead_route, (len(history),)).numpy())
    return np.concatenate(parts, axis=-1)


@dataclass(frozen=True)
class Standardizer:
    """Features to the unit scale an MLP was fitted at: (x - mean) / std, each column held
    within the range it had in the training data. An MLP cannot extrapolate; a feature that
    hardly varied in a small training set (std near 0) would otherwise turn an ordinary value
    at test time into thousands of standard deviations and the waypoints into kilometres."""

    mean: np.ndarray
    std: np.ndarray
    lo: np.ndarray  # the training data's smallest standardised value, per column
    hi: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Standardizer:
        # A constant column (a flag that is always 1 in the data) keeps unit scale: an input
        # seen only at serving time (an unknown lane pose) must not become a huge number.
        mean, std = x.mean(0), x.std(0)
        std = np.where(std < 1e-6, 1.0, std + 1e-6)
        z = (x - mean) / std
        return cls(mean, std, z.min(0), z.max(0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return np.clip((x - self.mean) / self.std, self.lo, self.hi)


@dataclass
class EgoMLP:
    """A 2-hidden-layer MLP on standardised ego features → (5, 2) waypoints."""

    net: nn.Module
    scale: Standardizer
    num_commands: int
    lane_pose: bool = False
    lead: bool = False
    beside: bool = False
    route: bool = False

    @classmethod
    def fit(
        cls,
        data: Examples,
        num_commands: int,
        hidden: int = 128,
        steps: int = 2000,
        lr: float = 1e-3,
        seed: int = 0,
        lane_pose: bool = False,
        lead: bool = False,
        beside: bool = False,
        route: bool = False,
    ) -> EgoMLP:
        """Full-batch AdamW on the L2 loss of the waypoints of `data`."""
        x = ego_features(data, num_commands, lane_pose, lead, beside, route)
        net, scale = fit_waypoint_mlp(x, data.future_xy, hidden, steps, lr, seed)
        return cls(net, scale, num_commands, lane_pose, lead, beside, route)

    def predict(self, data: Examples) -> np.ndarray:
        """(N, 5, 2) waypoints."""
        x = ego_features(
            data, self.num_commands, self.lane_pose, self.lead, self.beside, self.route
        )
        return self.predict_features(x)

    @torch.no_grad()
    def predict_features(self, x: np.ndarray) -> np.ndarray:
        """(N, 5, 2) waypoints of (N, F) unstandardised features (`ego_feature_rows`)."""
        return predict_waypoints(self.net, self.scale, x)


def fit_waypoint_mlp(
    x: np.ndarray,  # (N, F) features
    future_xy: np.ndarray,  # (N, 20, 2) the 4 Hz future; the MLP fits its 1..5 s waypoints
    hidden: int = 128,
    steps: int = 2000,
    lr: float = 1e-3,
    seed: int = 0,
) -> tuple[nn.Module, Standardizer]:
    """(net, scale): the ego-status MLP's recipe on any features (standardised, 2 hidden
    layers, full-batch AdamW on the waypoints' L2 loss), for `EgoMLP` and for studies of
    what an input is worth (scripts/open_loop_information.py)."""
    scale = Standardizer.fit(x)
    y = future_xy[:, WAYPOINT_INDEX].reshape(len(x), -1)  # (N, 10)
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Linear(x.shape[1], hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, y.shape[1]),
    ).double()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    xt = torch.from_numpy(scale(x))
    yt = torch.from_numpy(y.astype(np.float64))
    with single_thread():
        for _ in range(steps):
            loss = (net(xt) - yt).pow(2).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval(), scale


@torch.no_grad()
def predict_waypoints(net: nn.Module, scale: Standardizer, x: np.ndarray):
    """(N, 5, 2) waypoints of a `fit_waypoint_mlp` net on (N, F) unstandardised features."""
    with single_thread():
        return net(torch.from_numpy(scale(x))).numpy().reshape(len(x), 5, 2)


class EgoMLPPlanner:
    """The ego-status MLP as a runtime planner (`RuntimePlanner`): each plan is the MLP's five
    waypoints from the observation's ego history (resampled as the data set does, to
    `schema.num_history` rows `history_period_s` apart) and route command. It never sees the
    cameras; in closed loop it shows what the open-loop bar does when its own driving makes
    the history."""

    def __init__(self, mlp: EgoMLP, schema: DrivingSchema) -> None:
        self.mlp, self.schema = mlp, schema  # `schema`: the runtime keeps its history span
        # the lane-pose MLP reads /localization/lane_pose as a model trained with
        # `--ego-lane-pose` does (the runtime hands it over only to planners that read it)
        self.reads_lane_pose = mlp.lane_pose
        self.reads_lead = mlp.lead
        self.reads_beside = mlp.beside
        self.reads_route = mlp.route

    @classmethod
    def fit(
        cls,
        data_dir: str | Path,
        recipe: Recipe,
        steps: int = 2000,
        lane_pose: bool = False,
        lead: bool = False,
        beside: bool = False,
        route: bool = False,
    ) -> EgoMLPPlanner:
        """Fitted on the train split of a `blockplan dataset` folder, with `recipe`'s history
        rows (the model's: `blockplan eval` fits the same MLPs for its `ego_mlp` and
        `ego_mlp_lane_pose` rows)."""
        from blockplan.train.examples import load_shards

        train = load_shards(data_dir, "train", recipe, with_images=False)
        return cls.fit_examples(train, recipe.schema, steps, lane_pose, lead, beside, route)

    @classmethod
    def fit_examples(
        cls,
        train: Examples,
        schema: DrivingSchema,
        steps: int = 2000,
        lane_pose: bool = False,
        lead: bool = False,
        beside: bool = False,
        route: bool = False,
    ) -> EgoMLPPlanner:
        """Fitted on already-loaded examples (encoded with `schema`'s history rows)."""
        commands = len(schema.route_commands)
        mlp = EgoMLP.fit(
            train,
            commands,
            steps=steps,
            lane_pose=lane_pose,
            lead=lead,
            beside=beside,
            route=route,
        )
        return cls(mlp, schema)

    def features(self, observation: Observation) -> np.ndarray:
        """(1, F): the MLP's input for `observation` (`ego_feature_rows` of one sample)."""
        schema = self.schema
        history = ego_history_array(observation.ego_history, observation.stamp_ns, schema)
        command = observation.route_command
        if command not in schema.route_commands:
            raise ValueError(
                f"route command {command!r}: the MLP knows {list(schema.route_commands)}"
            )
        index = np.array([schema.route_commands.index(command)])
        pose = None
        if self.mlp.lane_pose:  # unknown (none recent enough): NaN, as in a data set sample
            pose = np.array([observation.lane_pose or (np.nan, np.nan)], dtype=np.float64)
        ahead = None
        if self.mlp.lead:  # likewise the car ahead
            ahead = np.array([observation.lead or (np.nan, np.nan)], dtype=np.float64)
        lanes = None
        if self.mlp.beside:  # and the lanes beside
            known = observation.beside is not None
            lanes = np.asarray(observation.beside if known else np.full((2, 5), np.nan))[None]
        path = None
        if self.mlp.route:  # and the route ahead
            known = observation.route_ahead is not None
            shape = (len(ROUTE_AHEAD_M), 2)
            path = np.asarray(observation.route_ahead if known else np.full(shape, np.nan))[None]
        return ego_feature_rows(
            history[None], index, self.mlp.num_commands, pose, ahead, lanes, path
        )

    def plan(self, observation: Observation) -> Plan:
        waypoints = self.mlp.predict_features(self.features(observation))[0]  # (5, 2)
        reads = [
            name
            for name, on in (
                ("lane pose", self.reads_lane_pose),
                ("lead", self.reads_lead),
                ("lanes beside", self.reads_beside),
                ("route", self.reads_route),
            )
            if on
        ]
        extra = f" ({', '.join(reads)})" if reads else ""
        return baseline_plan(observation.stamp_ns, waypoints, f"ego-status MLP baseline{extra}")

    def reset(self) -> None:
        """Nothing to forget: every plan depends on its observation only."""
