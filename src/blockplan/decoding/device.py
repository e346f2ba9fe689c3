"""Where the torch backend runs (`model.device`): the name resolved and checked, and the sync
the stage timers need on a GPU (kernels run asynchronously there: without it a stage's time
would show up in the next stage that waits for a result)."""

from __future__ import annotations

import torch

from blockplan.errors import UserError


class DeviceError(UserError, ValueError):
    """`model.device` names a device this machine does not have."""


def resolve_device(name: str) -> torch.device:
    """`cpu`, `cuda` or `cuda:N` as a torch device; raises `DeviceError` when it is absent."""
    device = torch.device(name)
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise DeviceError(f"model.device={name!r}: must be cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA (a CPU build)"
        raise DeviceError(
            f"model.device={name!r}: no CUDA device here (torch {torch.__version__}, "
            f"built with {built}); use model.device=cpu"
        )
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise DeviceError(f"model.device={name!r}: this machine has {count} CUDA device(s)")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
