"""The uniform average of model folders' weights (a "model soup").

Folders fine-tuned from one start lie in one basin of the loss, and the average of their
weights often keeps the strengths of each. The folders must have the same architecture: the
same tensor names, shapes and dtypes. The result takes the first folder's other files
(config, tokenizer, n-gram table) and a new manifest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from blockplan.model.weights import (
    CONFIG_NAME,
    MANIFEST_NAME,
    WEIGHTS_NAME,
    WeightsError,
    read_config,
    read_state_dict,
    verify_folder,
    write_manifest,
)


def average_folders(folders: list[Path], out: Path) -> Path:
    """Write the average of `folders`' weights (float64 sums, stored in each tensor's own
    dtype) to `out`, a model folder with the first folder's other files."""
    if len(folders) < 2:
        raise WeightsError(f"average: needs two model folders or more, not {len(folders)}")
    states = []
    for folder in folders:
        verify_folder(folder)
        states.append(read_state_dict(folder))
    first_config = read_config(folders[0])
    for folder, state in zip(folders[1:], states[1:], strict=True):
        if read_config(folder) != first_config:
            raise WeightsError(f"average: {folder}/{CONFIG_NAME} differs from {folders[0]}'s")
        if state.keys() != states[0].keys():
            raise WeightsError(f"average: {folder} has other tensors than {folders[0]}")
    averaged = {}
    for name, tensor in states[0].items():
        total = torch.zeros(tensor.shape, dtype=torch.float64)
        for folder, state in zip(folders, states, strict=True):
            other = state[name]
            if other.shape != tensor.shape or other.dtype != tensor.dtype:
                raise WeightsError(f"average: {folder}: tensor {name!r} has another shape/dtype")
            total += other.to(torch.float64)
        averaged[name] = (total / len(states)).to(tensor.dtype).contiguous()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for path in sorted(folders[0].iterdir()):
        if path.is_file() and path.name not in (WEIGHTS_NAME, MANIFEST_NAME):
            shutil.copy2(path, out / path.name)
    save_file(averaged, str(out / WEIGHTS_NAME))
    write_manifest(out)
    return out
