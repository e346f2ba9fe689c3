"""Open-loop baselines fitted and evaluated on the same split as the model (docs/ALGORITHMS.md §9).

* constant velocity: the ego keeps its ego-frame velocity at t0 for 5 s;
* ego-status MLP: an MLP from the ego history rows and the route command (no images) to the
  five waypoints, fitted on the training split — known to be strong open loop, the bar;
  with `lane_pose`, it also reads the lane pose at t0 (what a model trained with
  `--ego-lane-pose` gets besides the images), the fair bar for such a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from blockplan.train.examples import Examples
from blockplan.trajectory.upsample import WAYPOINT_TIMES_S

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


def ego_features(data: Examples, num_commands: int, lane_pose: bool = False) -> np.ndarray:
    """(N, F): the flattened ego history and a one-hot route command; with `lane_pose`, the
    lane pose too (zeros where unknown) and a known flag."""
    history = data.ego_history.reshape(len(data), -1)
    command = np.eye(num_commands)[data.command]
    parts = [history, command]
    if lane_pose:
        known = np.isfinite(data.lane_pose).all(axis=1, keepdims=True)
        parts += [np.where(known, data.lane_pose, 0.0), known.astype(np.float64)]
    return np.concatenate(parts, axis=-1)


@dataclass
class EgoMLP:
    """A 2-hidden-layer MLP on standardised ego features → (5, 2) waypoints."""

    net: nn.Module
    mean: np.ndarray
    std: np.ndarray
    num_commands: int
    lane_pose: bool = False

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
    ) -> EgoMLP:
        """Full-batch AdamW on the L2 loss of the waypoints of `data`."""
        x = ego_features(data, num_commands, lane_pose)
        mean, std = x.mean(0), x.std(0) + 1e-6
        y = data.future_xy[:, WAYPOINT_INDEX].reshape(len(data), -1)  # (N, 10)
        torch.manual_seed(seed)
        net = nn.Sequential(
            nn.Linear(x.shape[1], hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, y.shape[1]),
        ).double()
        opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
        xt = torch.from_numpy((x - mean) / std)
        yt = torch.from_numpy(y.astype(np.float64))
        with single_thread():
            for _ in range(steps):
                loss = (net(xt) - yt).pow(2).sum(-1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        return cls(net.eval(), mean, std, num_commands, lane_pose)

    @torch.no_grad()
    def predict(self, data: Examples) -> np.ndarray:
        """(N, 5, 2) waypoints."""
        x = ego_features(data, self.num_commands, self.lane_pose)
        x = torch.from_numpy((x - self.mean) / self.std)
        with single_thread():
            return self.net(x).numpy().reshape(len(data), 5, 2)
