"""Export (and import) samples in the Fast-dDrive JSON format.

Fast-dDrive trains Qwen2.5-VL-style chat records: image paths, a conversation (system,
human prompt with one `<image>` per frame, gpt answer in the driving schema's JSON), plus
the structured ground truth beside it. Our export writes, under DIR/fastddrive/:
    images/<scenario>-<seed>/<camera>_<ms>.jpg   every frame a sample uses, once
    parts/<split>/<scenario>-<seed>.json          the records of one episode (resumable)
    <split>.json                                  all records of a split, in manifest order
Each record: id, image (paths relative to DIR/fastddrive, view-major), conversations,
ego_history ([x, y, vx, vy, ax, ay] rows, ego frame at t0), future_waypoints (t = 1..5 s),
future_trajectory_4hz (20 points), meta_behavior, critical_objects, explanation,
route_command, scenario, seed, stamp_ns.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from blockplan.errors import UserError
from blockplan.schema import default_schema, render_prompt_text
from blockplan.types import CRITICAL_OBJECT_KEYS, DrivingAnswer, Lateral, Longitudinal

EXPORT_DIR = "fastddrive"
JPEG_QUALITY = 92


class FastDDriveError(UserError, ValueError):
    """A record of a Fast-dDrive JSON file lacks a field or holds a bad value."""


def _frame_name(camera: str, t: float) -> str:
    return f"{camera}_{int(round(t * 1000)):07d}.jpg"


def write_episode_export(
    root: Path,
    split: str,
    scenario: str,
    seed: int,
    arrays: dict[str, np.ndarray],
    frames: dict[float, dict[str, np.ndarray]],
) -> Path:
    """Write one episode's images and records; returns the part file."""
    from blockplan.sim.dataset import LATERAL_ORDER, LONGITUDINAL_ORDER

    schema = default_schema()
    base = Path(root) / EXPORT_DIR
    episode = f"{scenario}-{seed:06d}"
    img_dir = base / "images" / episode
    img_dir.mkdir(parents=True, exist_ok=True)
    for t, images in frames.items():
        for camera, rgb in images.items():
            path = img_dir / _frame_name(camera, t)
            if not path.exists():
                Image.fromarray(rgb).save(path, quality=JPEG_QUALITY)
    names = [str(n) for n in arrays["camera_names"]]
    num_frames = arrays["images"].shape[2]
    records = []
    for i in range(arrays["stamp_ns"].shape[0]):
        times = arrays["frame_stamps_ns"][i] / 1e9
        image_paths = [f"images/{episode}/{_frame_name(c, t)}" for c in names for t in times]
        history = arrays["ego_history"][i].astype(np.float64)
        prompt = render_prompt_text(
            None,
            schema,
            names,
            num_frames,
            ego_history=history,
            route_command=str(arrays["route_command"][i]),
        )
        stamp = int(arrays["stamp_ns"][i])
        records.append(
            {
                "id": f"{episode}-{stamp // 1_000_000:07d}",
                "image": image_paths,
                "conversations": [
                    {"from": "system", "value": prompt.system},
                    {"from": "human", "value": prompt.user},
                    {"from": "gpt", "value": str(arrays["answer_text"][i])},
                ],
                "ego_history": np.round(history, 3).tolist(),
                "future_waypoints": np.round(arrays["waypoints"][i].astype(float), 3).tolist(),
                "future_trajectory_4hz": np.round(arrays["future_xy"][i].astype(float), 3).tolist(),
                "meta_behavior": {
                    "longitudinal": LONGITUDINAL_ORDER[int(arrays["longitudinal"][i])].value,
                    "lateral": LATERAL_ORDER[int(arrays["lateral"][i])].value,
                },
                "critical_objects": {
                    k: "yes" if v else "no"
                    for k, v in zip(
                        CRITICAL_OBJECT_KEYS, arrays["critical"][i].tolist(), strict=True
                    )
                },
                "explanation": str(arrays["explanation"][i]),
                "route_command": str(arrays["route_command"][i]),
                "scenario": scenario,
                "seed": int(seed),
                "stamp_ns": stamp,
            }
        )
    part = base / "parts" / split / f"{episode}.json"
    part.parent.mkdir(parents=True, exist_ok=True)
    tmp = part.with_name(part.name + ".tmp")
    tmp.write_text(json.dumps(records))
    os.replace(tmp, part)
    return part


def assemble_export(root: Path, manifest: dict[str, Any]) -> dict[str, int]:
    """Concatenate the per-episode parts into <split>.json; returns records per split."""
    base = Path(root) / EXPORT_DIR
    counts = {}
    for split in ("train", "val", "test"):
        records: list[Any] = []
        for e in manifest["episodes"]:
            if e["split"] == split:
                part = base / "parts" / split / f"{e['scenario']}-{e['seed']:06d}.json"
                records += json.loads(part.read_text())
        base.mkdir(parents=True, exist_ok=True)
        (base / f"{split}.json").write_text(json.dumps(records))
        counts[split] = len(records)
    return counts


@dataclass(frozen=True)
class FastDDriveRecord:
    """One imported record: image paths (resolved), the prompt texts and the answer."""

    id: str
    image_paths: tuple[Path, ...]
    system: str
    prompt: str
    answer: DrivingAnswer
    ego_history: np.ndarray | None
    future_trajectory: np.ndarray | None


def _answer_fields(rec: dict[str, Any]) -> dict[str, Any]:
    """The answer's fields: the structured ones beside the conversation, else the gpt turn
    parsed as JSON in the Fast-dDrive schema."""
    if "meta_behavior" in rec and "future_waypoints" in rec:
        return {
            "critical_objects": rec.get("critical_objects", {}),
            "explanation": rec.get("explanation", ""),
            "future_meta_behavior": rec["meta_behavior"],
            "trajectory": rec["future_waypoints"],
        }
    gpt = [c for c in rec.get("conversations", []) if c.get("from") == "gpt"]
    if not gpt:
        raise FastDDriveError(f"record {rec.get('id')!r}: no gpt turn and no structured answer")
    try:
        return json.loads(gpt[-1]["value"])
    except json.JSONDecodeError as e:
        raise FastDDriveError(f"record {rec.get('id')!r}: gpt answer is not JSON: {e}") from e


def record_from_dict(rec: dict[str, Any], base_dir: Path) -> FastDDriveRecord:
    rid = rec.get("id")
    try:
        fields = _answer_fields(rec)
        critical = {
            k: str(fields["critical_objects"].get(k, "no")).lower() in ("yes", "true")
            for k in CRITICAL_OBJECT_KEYS
        }
        meta = fields["future_meta_behavior"]
        answer = DrivingAnswer(
            critical_objects=critical,
            explanation=str(fields.get("explanation", "")),
            longitudinal=Longitudinal(meta["longitudinal"]),
            lateral=Lateral(meta["lateral"]),
            waypoints=np.asarray(fields["trajectory"], dtype=np.float64),
        )
    except (KeyError, ValueError, TypeError) as e:
        raise FastDDriveError(f"record {rid!r}: bad answer: {e}") from e
    images = rec.get("image", [])
    images = [images] if isinstance(images, str) else images
    turns = {c.get("from"): c.get("value", "") for c in rec.get("conversations", [])}
    hist = rec.get("ego_history")
    fut = rec.get("future_trajectory_4hz")
    return FastDDriveRecord(
        id=str(rid),
        image_paths=tuple(base_dir / p for p in images),
        system=turns.get("system", ""),
        prompt=turns.get("human", ""),
        answer=answer,
        ego_history=None if hist is None else np.asarray(hist, dtype=np.float64),
        future_trajectory=None if fut is None else np.asarray(fut, dtype=np.float64),
    )


def read_fastddrive_json(path: str | Path) -> list[FastDDriveRecord]:
    """Read a Fast-dDrive JSON file (a list of records); image paths resolve against its
    folder."""
    path = Path(path)
    try:
        records = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise FastDDriveError(f"cannot read {path}: {e}") from e
    if not isinstance(records, list):
        raise FastDDriveError(f"{path}: expected a JSON list of records")
    return [record_from_dict(r, path.parent) for r in records]
