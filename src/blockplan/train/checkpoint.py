"""Checkpoints: a loadable model folder plus the trainer state, safetensors + JSON only.

DIR/
    model/                      config.json, model.safetensors, tokenizer.json, manifest.json
    optimizer.safetensors       AdamW moments per parameter index (`exp_avg.<i>`, ...)
    trainer_state.json          step, epoch, best validation loss, the train config
    probe.safetensors           training-only heads outside the model (the lane-pose probe), if any
No pickles: resuming never unpickles anything (the optimizer's scalar state is rebuilt).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from blockplan.errors import UserError
from blockplan.model.planner_model import (
    EGO_PREFIX,
    FLOW_PREFIX,
    VISUAL_PREFIX,
    ModelConfigError,
    PlannerModel,
)
from blockplan.model.weights import load_state, read_state_dict, verify_manifest

MODEL_DIR = "model"
OPTIMIZER_FILE = "optimizer.safetensors"
STATE_FILE = "trainer_state.json"
PROBE_FILE = "probe.safetensors"


class CheckpointError(UserError, ValueError):
    """A checkpoint folder that is incomplete or does not fit the run; names what."""


def save_checkpoint(
    path: str | Path,
    model: PlannerModel,
    tokenizer_json: str,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    probe: torch.nn.Module | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write the checkpoint to a temporary folder, then swap it in (never half-written).
    `extra_files`: more files of the model folder (`PlannerModel.save_pretrained`)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / MODEL_DIR, tokenizer_json=tokenizer_json, extra_files=extra_files)
    tensors = {}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, p in enumerate(params):
        for key, value in optimizer.state.get(p, {}).items():
            if torch.is_tensor(value) and value.dim() > 0:
                tensors[f"{key}.{i}"] = value.detach().contiguous()
    save_file(tensors, tmp / OPTIMIZER_FILE)
    if probe is not None:
        save_file(
            {k: v.detach().contiguous() for k, v in probe.state_dict().items()}, tmp / PROBE_FILE
        )
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")
    old = path.with_name(path.name + ".old")
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    if old.exists():
        shutil.rmtree(old)
    return path


def load_checkpoint(
    path: str | Path,
    model: PlannerModel,
    optimizer: torch.optim.Optimizer,
    probe: torch.nn.Module | None = None,
) -> dict[str, Any]:
    """Load weights and optimizer moments in place; return the trainer state. `probe`: a
    training-only head, loaded where the checkpoint has one (else it keeps its start)."""
    path = Path(path)
    for name in (MODEL_DIR, OPTIMIZER_FILE, STATE_FILE):
        if not (path / name).exists():
            raise CheckpointError(f"{path}: incomplete checkpoint, no {name}")
    folder = path / MODEL_DIR
    verify_manifest(folder)
    state = read_state_dict(folder)
    text = {
        k: v for k, v in state.items() if not k.startswith((VISUAL_PREFIX, FLOW_PREFIX, EGO_PREFIX))
    }
    if model.config.decoder.tie_word_embeddings:
        text["lm_head.weight"] = text["model.embed_tokens.weight"]
    load_state(model.decoder, text, str(folder))
    try:
        model.load_parts(state, str(folder))
    except ModelConfigError as e:
        raise CheckpointError(f"{e} (the checkpoint does not fit this run)") from None
    if probe is not None and (path / PROBE_FILE).exists():
        try:
            probe.load_state_dict(load_file(path / PROBE_FILE))
        except RuntimeError as e:
            raise CheckpointError(f"{path}: {PROBE_FILE} does not fit this run: {e}") from None
    moments = load_file(path / OPTIMIZER_FILE)
    trainer_state = json.loads((path / STATE_FILE).read_text())
    params = [p for group in optimizer.param_groups for p in group["params"]]
    step = float(trainer_state["step"])
    for i, p in enumerate(params):
        entry = {
            k.rsplit(".", 1)[0]: v for k, v in moments.items() if k.rsplit(".", 1)[1] == str(i)
        }
        if not entry:
            continue
        if any(v.shape != p.shape for v in entry.values()):
            raise CheckpointError(f"{path}: optimizer moments of parameter {i} do not fit")
        optimizer.state[p] = {"step": torch.tensor(step), **entry}
    return trainer_state
