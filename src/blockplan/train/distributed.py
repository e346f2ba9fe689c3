"""One process or a torchrun DDP group: gloo on CPU, nccl on GPU.

A run is distributed when torchrun launched it (`torch.distributed.is_torchelastic_launched`).
Each rank sees a disjoint shard of every epoch (`DistributedSampler`) and DDP averages the
gradients, so all ranks hold identical parameters after every step; `parameter_digest` lets
the trainer (and the tests) check that.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str = "auto") -> DistContext:
    """Join the torchrun group if launched by torchrun, else a single-process context."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if not dist.is_torchelastic_launched():
        return DistContext(device=torch.device("cuda" if use_cuda else "cpu"))
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if use_cuda:
        local = rank % torch.cuda.device_count()
        torch.cuda.set_device(local)
        return DistContext(rank, world, torch.device("cuda", local))
    return DistContext(rank, world, torch.device("cpu"))


def close_distributed(ctx: DistContext) -> None:
    if ctx.is_distributed and dist.is_initialized():
        dist.destroy_process_group()


def parameter_digest(model: torch.nn.Module) -> str:
    """sha256 over every parameter's bytes, in `named_parameters` order."""
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def gather_digests(ctx: DistContext, digest: str) -> list[str]:
    """Every rank's digest, in rank order (just this one without a group)."""
    if not ctx.is_distributed:
        return [digest]
    out: list[str] = [""] * ctx.world_size
    dist.all_gather_object(out, digest)
    return out


def all_reduce_mean(ctx: DistContext, value: torch.Tensor) -> torch.Tensor:
    if ctx.is_distributed:
        value = value.clone()
        dist.all_reduce(value)
        value /= ctx.world_size
    return value
