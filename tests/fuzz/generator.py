"""Malformed variants of a model folder (config.json, tokenizer.json, manifest.json, the
weights, symlinks) and of a params YAML file, for the fuzz tests beside this module.

A `Variant` is one fault: `make` edits a copy of a shipped folder (or writes a params file),
`file` and `key` are what the loader's error must name. A fault in a file's content comes
with a manifest re-written over the edited folder, so that the content is what the loader
meets and not the stale checksum; a fault in the manifest (or a symlink the manifest covers)
leaves the manifest as the variant wrote it.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONFIG, TOKENIZER, MANIFEST, WEIGHTS = (
    "config.json",
    "tokenizer.json",
    "manifest.json",
    "model.safetensors",
)
HUGE = 10**9  # a vocabulary, a budget
MANY = 10**6  # layers, frames


@dataclass(frozen=True)
class Variant:
    """One malformed folder or params file. `file`: the file name the error names; `key`:
    the setting it names too (None: a fault of the file as a whole)."""

    id: str
    file: str
    key: str | None
    make: Callable[[Path], None]
    remanifest: bool = True  # re-write the manifest after `make` (a fault in content)


# ---- writing files --------------------------------------------------------------------------


def write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` (never writing through a hard link into the pristine copy)."""
    if path.is_symlink() or path.exists():
        path.unlink()
    path.write_bytes(data)


def write_json(path: Path, doc: Any) -> None:
    write_bytes(path, (json.dumps(doc, indent=2) + "\n").encode())


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def set_key(doc: dict, dotted: str, value: Any) -> dict:
    """A copy of `doc` with `a.b.c` set to `value`."""
    doc = copy.deepcopy(doc)
    node = doc
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = value
    return doc


def drop_key(doc: dict, dotted: str) -> dict:
    doc = copy.deepcopy(doc)
    node = doc
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node[part]
    del node[leaf]
    return doc


def copy_folder(pristine: Path, target: Path) -> Path:
    """`pristine` into `target`: small files copied, the weights hard-linked (variants
    replace files, never write into them: `write_bytes`)."""
    target.mkdir(parents=True)
    for p in pristine.iterdir():
        if p.name == WEIGHTS:
            try:
                os.link(p, target / p.name)
                continue
            except OSError:
                pass
        shutil.copy2(p, target / p.name)
    return target


# ---- faults of any JSON or YAML file --------------------------------------------------------


def encoding_faults(name: str, text: Callable[[Path], str]) -> Iterator[Variant]:
    """A file as a whole: not the format, truncated, empty, wrong encodings, too deep."""

    def edit(transform: Callable[[str], bytes]) -> Callable[[Path], None]:
        return lambda folder: write_bytes(folder / name, transform(text(folder)))

    yield Variant(f"{name}:empty", name, None, edit(lambda t: b""))
    yield Variant(f"{name}:truncated", name, None, edit(lambda t: t[: len(t) // 2].encode()))
    yield Variant(f"{name}:first-byte", name, None, edit(lambda t: t[:1].encode()))
    yield Variant(f"{name}:utf16", name, None, edit(lambda t: t.encode("utf-16")))
    yield Variant(f"{name}:utf8-bom", name, None, edit(lambda t: b"\xef\xbb\xbf" + t.encode()))
    yield Variant(
        f"{name}:invalid-utf8",
        name,
        None,
        edit(lambda t: t[:20].encode() + b"\xff\xfe\xc3(" + t[20:].encode()),
    )
    yield Variant(f"{name}:nul-bytes", name, None, edit(lambda t: t.encode().replace(b" ", b"\0")))
    yield Variant(f"{name}:binary", name, None, edit(lambda t: bytes(range(256)) * 4))
    yield Variant(
        f"{name}:deep-nesting", name, None, edit(lambda t: b"[" * 100_000 + b"]" * 100_000)
    )


def json_shape_faults(name: str, doc: Callable[[Path], Any]) -> Iterator[Variant]:
    """A JSON file that parses but is not an object, or repeats a key."""
    for label, value in (
        ("list", [1, 2, 3]),
        ("string", "config"),
        ("number", 42),
        ("null", None),
    ):
        yield Variant(f"{name}:{label}", name, None, lambda f, v=value: write_json(f / name, v))
    yield Variant(
        f"{name}:not-json",
        name,
        None,
        lambda f: write_bytes(f / name, b"model_type = 'blockplan_planner'\n"),
    )
    yield Variant(
        f"{name}:trailing-garbage",
        name,
        None,
        lambda f: write_bytes(f / name, (json.dumps(doc(f)) + "\n}{").encode()),
    )

    def duplicated(folder: Path) -> None:
        d = doc(folder)
        first = next(iter(d))
        body = json.dumps(d)[1:]  # the object without its opening brace
        write_bytes(
            folder / name, (f"{{{json.dumps(first)}: {json.dumps(d[first])}, " + body).encode()
        )

    key = None if name == MANIFEST else None
    yield Variant(f"{name}:duplicated-key", name, key, duplicated)


# ---- config.json ----------------------------------------------------------------------------

# (dotted key, bad values) for both embodiments; values a config.json must never load with
COMMON_CONFIG_FAULTS: list[tuple[str, list[Any]]] = [
    ("text_config.vocab_size", [HUGE, -1, 0, "768", 7.5, None, True]),
    ("text_config.hidden_size", [2**20, 0, -128, "128", 128.5]),
    ("text_config.intermediate_size", [2**24, 0, [344]]),
    ("text_config.num_hidden_layers", [MANY, -4, 0, "4"]),
    ("text_config.num_attention_heads", [0, -2, 3, 2**16]),
    ("text_config.num_key_value_heads", [0, 2**10, "1"]),
    ("text_config.max_position_embeddings", [0, -1, 10**15]),
    ("text_config.rms_norm_eps", [-1e-6, "tiny", float("nan")]),
    ("text_config.rope_theta", [0, -10000.0, float("inf")]),
    ("text_config.tie_word_embeddings", ["yes", 1]),
    ("text_config.head_dim", [0, 3, 2**20]),
    ("vision_config.image_height", [10**6, 0, -48, "48"]),
    ("vision_config.image_width", [10**6, 4.5]),
    ("vision_config.channels", [[], [-8, 16, 32], "8,16,32", [2**20, 16, 32], 8]),
    ("vision_config.grid", [[0, 3], [10**4, 10**4], "2x3", [2], 2]),
    ("vision_config.scene", [-1, "2"]),
    ("vision_config.keypoints", [-3, 10**6]),
    ("vision_config.unknown_setting", [1]),
    ("camera_names", [[], "front", [1, 2], ["front", "front"], [""] * 3, None]),
    ("num_frames", [0, -1, MANY, "2", 1.5]),
    ("block_size", [0, -32, HUGE, "32"]),
    ("tokens_per_image", [999, -1]),
    ("visual_attention", ["everything", 3]),
    ("frame_slot_embedding", ["false", 0]),
    ("model_type", ["gpt2", 5, None]),
    ("schema", ["none", [1, 2]]),
]
VEHICLE_CONFIG_FAULTS: list[tuple[str, list[Any]]] = [
    ("schema.explanation_budget", [HUGE, -1, "24"]),
    ("schema.meta_budget", [0, MANY]),
    ("schema.int_digits", [-1, 10**4]),
    ("schema.frac_digits", [-1]),
    ("schema.num_history", [0, MANY]),
    ("schema.history_period_s", [-0.5, "0.5"]),
    ("schema.critical_object_keys", ["pedestrian", [1, 2]]),
    ("schema.route_commands", [[]]),
    ("schema.mask_token", [""]),
    ("schema.unknown_schema_key", [1]),
    ("frame_period_s", [-0.5, 0, "0.5"]),
    ("ego_encoder.tokens", [0, MANY]),
    ("ego_encoder.hidden", [HUGE, -1]),
    ("ego_encoder.rows", [MANY]),
    ("ego_encoder.unknown_setting", [True]),
    ("ego_encoder", ["on", [4, 5]]),
]
ROBOT_CONFIG_FAULTS: list[tuple[str, list[Any]]] = [
    ("schema.horizon", [0, HUGE, "8"]),
    ("schema.action_dim", [0, MANY]),
    ("schema.num_bins", [0, 1, HUGE]),
    ("schema.action_low", [[-1.0], "low", [2.0, 2.0, 2.0, 2.0]]),
    ("schema.proprio_dim", [0, HUGE]),
    ("schema.proprio_low", [[0.0]]),
    ("schema.instruction_budget", [-1, HUGE]),
    ("schema.bin_token_offset", [-1, HUGE]),
    ("schema.unknown_schema_key", [1]),
    ("embodiment", ["tank", 7]),
]
MISSING_CONFIG_KEYS = (
    "text_config",
    "vision_config",
    "camera_names",
    "num_frames",
    "model_type",
    "text_config.vocab_size",
    "text_config.num_hidden_layers",
)


def value_label(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 16 else f"{text[:12]}..{len(text)}"


def config_variants(pristine: Path, robot: bool) -> Iterator[Variant]:
    original = read_json(pristine / CONFIG)
    faults = COMMON_CONFIG_FAULTS + (ROBOT_CONFIG_FAULTS if robot else VEHICLE_CONFIG_FAULTS)
    for dotted, values in faults:
        parent = dotted.rpartition(".")[0]
        if parent and parent.split(".")[0] not in original:
            continue
        for value in values:
            doc = set_key(original, dotted, value)
            leaf = dotted.rpartition(".")[2]
            yield Variant(
                f"config:{dotted}={value_label(value)}",
                CONFIG,
                leaf,
                lambda f, d=doc: write_json(f / CONFIG, d),
            )
    for dotted in MISSING_CONFIG_KEYS:
        doc = drop_key(original, dotted)
        yield Variant(
            f"config:missing:{dotted}",
            CONFIG,
            dotted.rpartition(".")[2],
            lambda f, d=doc: write_json(f / CONFIG, d),
        )
    yield Variant(
        "config:text_config-is-a-list",
        CONFIG,
        "text_config",
        lambda f: write_json(f / CONFIG, set_key(original, "text_config", [1, 2])),
    )
    yield from encoding_faults(CONFIG, lambda f: (f / CONFIG).read_text(encoding="utf-8"))
    yield from json_shape_faults(CONFIG, lambda f: read_json(f / CONFIG))
    yield Variant(
        "config:huge-file",
        CONFIG,
        None,
        lambda f: write_bytes(
            f / CONFIG,
            json.dumps(original).encode()[:-1] + b', "pad": "' + b"x" * (2 << 20) + b'"}',
        ),
    )


# ---- tokenizer.json -------------------------------------------------------------------------


def tokenizer_variants(pristine: Path) -> Iterator[Variant]:
    original = read_json(pristine / TOKENIZER)

    def doc_with(edit: Callable[[dict], None]) -> Callable[[Path], None]:
        def make(folder: Path) -> None:
            d = copy.deepcopy(original)
            edit(d)
            write_json(folder / TOKENIZER, d)

        return make

    def no_mask(d: dict) -> None:
        d["added_tokens"] = [t for t in d["added_tokens"] if t["content"] != "<|MASK|>"]
        d["model"]["vocab"].pop("<|MASK|>", None)

    def huge_id(d: dict) -> None:
        d["added_tokens"].append(dict(d["added_tokens"][-1], id=HUGE, content="<|far|>"))

    def beyond_model(d: dict) -> None:
        vocab = d["model"]["vocab"]
        top = max(vocab.values())
        for i in range(1, 2000):
            vocab[f"zz{i}"] = top + i

    yield Variant(
        "tokenizer:empty-object", TOKENIZER, None, lambda f: write_json(f / TOKENIZER, {})
    )
    yield Variant("tokenizer:no-model", TOKENIZER, "model", doc_with(lambda d: d.pop("model")))
    yield Variant(
        "tokenizer:model-type",
        TOKENIZER,
        "model",
        doc_with(lambda d: d["model"].update(type="Nope")),
    )
    yield Variant(
        "tokenizer:vocab-list",
        TOKENIZER,
        "model",
        doc_with(lambda d: d["model"].update(vocab=[1, 2])),
    )
    yield Variant(
        "tokenizer:merges-garbage",
        TOKENIZER,
        "model",
        doc_with(lambda d: d["model"].update(merges=[[1, 2, 3]])),
    )
    yield Variant(
        "tokenizer:added-tokens-object",
        TOKENIZER,
        "added_tokens",
        doc_with(lambda d: d.update(added_tokens={"a": 1})),
    )
    yield Variant("tokenizer:no-mask-token", TOKENIZER, "<|MASK|>", doc_with(no_mask))
    yield Variant("tokenizer:token-id-1e9", TOKENIZER, "vocab_size", doc_with(huge_id))
    yield Variant("tokenizer:beyond-the-model", TOKENIZER, "vocab_size", doc_with(beyond_model))
    yield from encoding_faults(TOKENIZER, lambda f: (f / TOKENIZER).read_text(encoding="utf-8"))
    yield from json_shape_faults(TOKENIZER, lambda f: read_json(f / TOKENIZER))


# ---- manifest.json (left stale: the fault is the manifest) ---------------------------------


def manifest_variants(pristine: Path) -> Iterator[Variant]:
    original = read_json(pristine / MANIFEST)
    digests = original["sha256"]
    zero = "0" * 64

    def with_digests(edit: Callable[[dict], Any]) -> Callable[[Path], None]:
        def make(folder: Path) -> None:
            d = dict(digests)
            out = edit(d)  # a new manifest, or None: `d` edited in place
            write_json(folder / MANIFEST, out if isinstance(out, dict) else {"sha256": d})

        return make

    def stale(id_: str, key: str | None, make: Callable[[Path], None]) -> Variant:
        return Variant(f"manifest:{id_}", MANIFEST, key, make, remanifest=False)

    for name in (CONFIG, TOKENIZER, WEIGHTS):
        yield stale(f"omits-{name}", name, with_digests(lambda d, n=name: d.pop(n)))
        yield stale(
            f"wrong-digest-{name}", name, with_digests(lambda d, n=name: d.update({n: zero}))
        )
    for label, path in (
        ("dotdot", "../x"),
        ("dotdot-config", "../config.json"),
        ("absolute", "/etc/passwd"),
        ("parent", ".."),
        ("empty-name", ""),
        ("subdir", "sub/config.json"),
        ("backslash", "..\\x"),  # a plain name on Linux; refused all the same
    ):
        key = path if path and "\\" not in path else None  # an error shows the repr
        yield stale(f"path-{label}", key, with_digests(lambda d, p=path: d.update({p: zero})))
    yield stale(
        "lists-a-missing-file", "ghost.bin", with_digests(lambda d: d.update({"ghost.bin": zero}))
    )
    yield stale("digest-int", CONFIG, with_digests(lambda d: d.update({CONFIG: 12345})))
    yield stale("digest-short", CONFIG, with_digests(lambda d: d.update({CONFIG: "abc"})))
    yield stale("digest-not-hex", CONFIG, with_digests(lambda d: d.update({CONFIG: "g" * 64})))
    yield stale(
        "digest-uppercase-spaced",
        CONFIG,
        with_digests(lambda d: d.update({CONFIG: " " + d[CONFIG][1:]})),
    )
    yield stale("no-sha256", "sha256", with_digests(lambda d: {"files": d}))
    yield stale("sha256-empty", "sha256", with_digests(lambda d: {"sha256": {}}))
    yield stale("sha256-list", "sha256", with_digests(lambda d: {"sha256": list(d)}))
    yield stale("unknown-key", "sha512", with_digests(lambda d: {"sha256": d, "sha512": {}}))

    def duplicated(folder: Path) -> None:
        body = json.dumps(digests)[1:]
        text = f'{{"sha256": {{"{CONFIG}": "{zero}", {body}}}'
        write_bytes(folder / MANIFEST, text.encode())

    yield stale("duplicated-entry", CONFIG, duplicated)
    for v in encoding_faults(MANIFEST, lambda f: (f / MANIFEST).read_text(encoding="utf-8")):
        yield Variant(v.id, v.file, v.key, v.make, remanifest=False)
    for v in json_shape_faults(MANIFEST, lambda f: read_json(f / MANIFEST)):
        key = "sha256" if v.id.endswith("duplicated-key") else v.key
        yield Variant(v.id, v.file, key, v.make, remanifest=False)


# ---- symlinks and weights -------------------------------------------------------------------


def outside_of(folder: Path) -> Path:
    """A folder beside `folder` (outside it) for the symlinks' targets."""
    out = folder.parent / "outside"
    out.mkdir(exist_ok=True)
    return out


def symlink_variants() -> Iterator[Variant]:
    """A file of the folder replaced by a symlink to an identical copy outside it; the
    manifest is re-written (its digests match) — the link is the fault, not the content."""

    def link(name: str) -> Callable[[Path], None]:
        def make(folder: Path) -> None:
            target = outside_of(folder) / f"{folder.name}-{name}"
            shutil.copy2(folder / name, target)
            (folder / name).unlink()
            (folder / name).symlink_to(target)

        return make

    for name in (CONFIG, TOKENIZER, WEIGHTS):
        yield Variant(f"symlink:{name}", name, None, link(name))
    yield Variant(f"symlink:{MANIFEST}", MANIFEST, None, link(MANIFEST), remanifest=False)

    def dir_link(folder: Path) -> None:  # config.json -> ../<outside>/config.json via ..
        target = outside_of(folder) / f"{folder.name}-rel-{CONFIG}"
        shutil.copy2(folder / CONFIG, target)
        (folder / CONFIG).unlink()
        (folder / CONFIG).symlink_to(os.path.relpath(target, folder))

    yield Variant("symlink:relative-dotdot", CONFIG, None, dir_link)
    yield Variant(
        "symlink:dangling",
        TOKENIZER,
        None,
        lambda f: ((f / TOKENIZER).unlink(), (f / TOKENIZER).symlink_to(outside_of(f) / "nowhere")),
    )


def weights_variants() -> Iterator[Variant]:
    def edit(transform: Callable[[bytes], bytes]) -> Callable[[Path], None]:
        return lambda folder: write_bytes(
            folder / WEIGHTS, transform((folder / WEIGHTS).read_bytes())
        )

    def header(data: bytes, new: bytes) -> bytes:
        n = int.from_bytes(data[:8], "little")
        return len(new).to_bytes(8, "little") + new + data[8 + n :]

    def huge_tensor(data: bytes) -> bytes:
        n = int.from_bytes(data[:8], "little")
        head = json.loads(data[8 : 8 + n])
        name = next(k for k in head if k != "__metadata__")
        head[name]["shape"] = [HUGE, HUGE]
        return header(data, json.dumps(head).encode())

    yield Variant("weights:truncated", WEIGHTS, None, edit(lambda b: b[: len(b) // 2]))
    yield Variant("weights:empty", WEIGHTS, None, edit(lambda b: b""))
    yield Variant(
        "weights:header-length-1e15",
        WEIGHTS,
        None,
        edit(lambda b: (10**15).to_bytes(8, "little") + b[8:]),
    )
    yield Variant("weights:header-not-json", WEIGHTS, None, edit(lambda b: header(b, b"{not json")))
    yield Variant("weights:tensor-1e18", WEIGHTS, None, edit(huge_tensor))


def folder_variants(pristine: Path, robot: bool) -> list[Variant]:
    """Every variant of one shipped folder."""
    return [
        *config_variants(pristine, robot),
        *tokenizer_variants(pristine),
        *manifest_variants(pristine),
        *symlink_variants(),
        *weights_variants(),
    ]


def build(pristine: Path, variant: Variant, target: Path) -> Path:
    """A copy of `pristine` at `target` with `variant`'s fault."""

    folder = copy_folder(pristine, target)
    variant.make(folder)
    if variant.remanifest:
        remanifest(pristine, folder)
    return folder


def remanifest(pristine: Path, folder: Path) -> None:
    """`write_manifest(folder)`, hashing only the files that are not `pristine`'s own (the
    hard-linked weights keep their recorded digest)."""
    from blockplan.model.weights import sha256_file

    known = read_json(pristine / MANIFEST)["sha256"]
    digests = {}
    for p in sorted(folder.iterdir()):
        if p.name == MANIFEST or not p.is_file():
            continue
        same = p.name in known and not p.is_symlink() and os.path.samefile(p, pristine / p.name)
        digests[p.name] = known[p.name] if same else sha256_file(p)
    write_json(folder / MANIFEST, {"sha256": digests})


# ---- params YAML ----------------------------------------------------------------------------

PARAMS_FAULTS: list[tuple[str, list[Any]]] = [
    ("model.num_threads", ["one", -1, 0, MANY, 1.5, True]),
    ("model.dtype", ["float128", 32]),
    ("model.backend", ["cuda-magic", None]),
    ("model.dir", ["", 5, ["models"]]),
    ("model.unknown_key", [1]),
    ("decoding.strategy", ["magic", 5]),
    ("decoding.confidence_threshold", [-0.5, 2.0, "high", float("nan")]),
    ("decoding.max_denoise_steps", [0, -3, HUGE]),
    ("rollouts.num_rollouts", [0, HUGE]),
    ("rollouts.temperature", [-1.0, float("inf")]),
    ("control.rate_hz", [0, -10.0, "fast", float("nan"), 1e9]),
    ("control.max_plan_age_s", [-1.0, float("inf")]),
    ("control.unknown_key", ["x"]),
    ("frame_window.num_frames", [0, -2, MANY, "2"]),
    ("frame_window.frame_period_s", [0, -0.5]),
    ("frame_window.max_frame_age_s", [-0.3]),
    ("frame_window.stale_camera_policy", ["ignore"]),
    ("trajectory.dt", [0, -0.25, 1e-12]),
    ("trajectory.horizon_s", [0, 1e9]),
    ("gates.max_speed", [-40.0, float("nan")]),
    ("cameras.names", ["front", [1, 2], [], None]),
    ("cameras.front", [["/topic"], "front"]),
    ("cameras.front.transport", ["carrier-pigeon"]),
    ("flow.evaluate_steps", [[-1], "1,2", [[1, 2]]]),
    ("unknown_section", [{"a": 1}]),
]


def params_doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _params(doc: dict) -> dict:
    return next(iter(doc.values()))["ros__parameters"]


def params_variants(pristine: Path) -> Iterator[Variant]:
    """Variants of one params file (`pristine`); `make` writes `<folder>/<pristine.name>`."""
    name = pristine.name
    original = params_doc(pristine)
    node = next(iter(original))

    def write(doc: Any) -> Callable[[Path], None]:
        return lambda folder: write_bytes(
            folder / name, yaml.safe_dump(doc, sort_keys=False).encode()
        )

    def write_text(text: str) -> Callable[[Path], None]:
        return lambda folder: write_bytes(folder / name, text.encode())

    params = _params(original)
    for dotted, values in PARAMS_FAULTS:
        head = dotted.split(".")[0]
        if (
            head not in params
            and not dotted.startswith("unknown")
            and not dotted.endswith("unknown_key")
        ):
            continue
        if dotted.startswith("cameras.front") and "front" not in params.get("cameras", {}).get(
            "names", []
        ):
            continue
        for value in values:
            doc = copy.deepcopy(original)
            node_params = _params(doc)
            *parents, leaf = dotted.split(".")
            at = node_params
            for part in parents:
                at = at.setdefault(part, {})
            at[leaf] = value
            yield Variant(f"params:{dotted}={value_label(value)}", name, leaf, write(doc))
    yield Variant(
        "params:unknown-node-key", name, "remap", write({node: {**original[node], "remap": 1}})
    )
    yield Variant("params:wrong-node", name, "other_node", write({"other_node": original[node]}))
    yield Variant("params:no-ros-parameters", name, "ros__parameters", write({node: {}}))
    yield Variant(
        "params:ros-parameters-list",
        name,
        "ros__parameters",
        write({node: {"ros__parameters": [1, 2]}}),
    )
    yield Variant("params:top-level-list", name, None, write([original]))
    yield Variant("params:scalar", name, None, write_text("blockplan\n"))
    yield Variant("params:tabs", name, None, write_text(f"{node}:\n\tros__parameters: {{}}\n"))
    yield Variant("params:unclosed", name, None, write_text(f"{node}: {{ros__parameters: [\n"))
    yield Variant(
        "params:duplicated-key",
        name,
        "model",
        write_text(f"{node}:\n  ros__parameters:\n    model: {{}}\n    model: {{}}\n"),
    )

    def bomb(levels: int = 6) -> str:  # 10**levels integers from a few lines of anchors
        text = "&a0 [" + ", ".join(["1"] * 10) + "]"
        for k in range(1, levels):
            text = f"&a{k} [{text}, " + ", ".join([f"*a{k - 1}"] * 9) + "]"
        return text

    yield Variant(
        "params:alias-bomb-list",
        name,
        "evaluate_steps",
        write_text(f"{node}:\n  ros__parameters:\n    flow:\n      evaluate_steps: {bomb()}\n"),
    )
    yield Variant(
        "params:alias-bomb-map",
        name,
        "bomb",
        write_text(
            f"{node}:\n  ros__parameters:\n"
            "    bomb: &m3 {x: &m2 {x: &m1 {x: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6}, "
            "y: *m0, z: *m0, w: *m0}, y: *m1, z: *m1, w: *m1}, y: *m2, z: *m2, w: *m2}\n"
        ),
    )
    yield Variant(
        "params:huge-file",
        name,
        None,
        lambda f: write_bytes(f / name, pristine.read_bytes() + b"#" * (4 << 20) + b"\n"),
    )
    yield Variant(
        "params:python-tag", name, None, write_text(f"{node}: !!python/object:os.system ls\n")
    )
    source = pristine.read_text(encoding="utf-8")
    cut = source.rindex("[") + 3  # inside a flow list: no longer YAML
    yield Variant("params:truncated", name, None, write_text(source[:cut]))
    for v in encoding_faults(name, lambda f: source):
        if v.id.endswith(("utf8-bom", "truncated", "first-byte")):
            # a BOM is valid YAML, and a file cut at a line end is a shorter valid one
            continue
        yield Variant(v.id.replace(name, "params"), v.file, v.key, v.make)
