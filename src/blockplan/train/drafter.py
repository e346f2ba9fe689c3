"""Train a DFlash drafter (`model/drafter.py`) by distillation on its target's own greedy
answers (`blockplan train-drafter`; docs/ALGORITHMS.md §4.7).

1. The target plans every observation greedily (a lossless strategy: AR greedy's tokens).
2. One teacher-forced forward of the target over prompt + answer (causal, as the cache
   holds it while decoding) gives the hidden states of the drafter's target layers at every
   answer position and the prompt's last C.
3. Examples are the windows scaffold spec verifies: from every answer position w (the
   token at w known, as after a correction) to the end of its scaffold block, and a
   shorter window as `decoding.spec_window: adaptive` cuts them. The drafter sees the C
   feature rows before w, the structural tokens of the window and mask vectors at its
   editable slots, and learns the target's tokens there (cross-entropy over its
   vocabulary: every token of the answers' editable slots). Every kind of slot is in
   them: section keys and boundaries, flags, meta words, explanation text, padding and
   the trajectory's digits and signs.

The held-out answers (`val_fraction`) report the drafter's token accuracy and the mean
number of slots a window accepts before the first wrong draft.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from blockplan.model.drafter import Drafter, DrafterConfig, decoder_sha256, default_target_layers
from blockplan.schema.layout import block_end_at

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DrafterOptions:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_layers: int = 1
    num_heads: int = 4
    context: int = 8
    target_layers: tuple[int, ...] | None = None  # None: `default_target_layers`
    steps: int = 800
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    val_fraction: float = 0.1
    seed: int = 0
    answer_strategy: str = "scaffold_spec"  # how the target's greedy answers are decoded


@dataclass
class Distilled:
    """The target's greedy answers (N, A) and its feature rows (N, C + A, F)."""

    answers: np.ndarray
    features: torch.Tensor
    valid: np.ndarray  # (N, C + A) rows that exist


def greedy_answers(
    planner, observations: Sequence, strategy: str = "scaffold_spec", say: Progress = print
) -> np.ndarray:
    """(N, A) the target's greedy answer to each observation (no draft from the last plan:
    only the forward count would differ)."""
    rows = []
    t0 = time.perf_counter()
    for i, obs in enumerate(observations):
        planner.previous_answer = None
        rows.append(planner.decode(obs, strategy).result.tokens[0])
        if (i + 1) % 25 == 0 or i + 1 == len(observations):
            say(
                f"train-drafter: {i + 1}/{len(observations)} answers ({time.perf_counter() - t0:.0f} s)"
            )
    planner.previous_answer = None
    return np.stack(rows)


@torch.no_grad()
def target_features(
    planner, observation, answer: np.ndarray, layers: tuple[int, ...], context: int
) -> torch.Tensor:
    """(C + A, F) the target's residual stream after `layers` at the prompt's last C
    positions and every answer position, from one teacher-forced causal forward."""
    embeds, _ = planner.embed(observation, {})  # (1, P, Hd)
    P, A = embeds.shape[1], len(answer)
    ids = torch.as_tensor(np.asarray(answer), dtype=torch.long, device=embeds.device)[None]
    inputs = torch.cat([embeds, planner.model.embed(ids)], dim=1)  # (1, P + A, Hd)
    mask = torch.zeros(P + A, P + A, dtype=torch.bool)
    mask[:P, :P] = planner.prompt_mask
    mask[P:, :P] = True
    mask[P:, P:] = torch.ones(A, A, dtype=torch.bool).tril()
    if planner.positions is None:
        positions = torch.arange(P + A)
    else:
        positions = planner.positions.with_answer(A)
    _, hidden = planner.runner(
        inputs_embeds=inputs,
        positions=positions,
        mask=mask,
        num_logits=1,
        hidden_layers=layers,
    )  # (1, P + A, F)
    return hidden[0, P - context :].float().cpu()


def distill(
    planner, observations: Sequence, options: DrafterOptions, say: Progress = print
) -> Distilled:
    """The greedy answers and the feature rows of `observations`."""
    L = planner.model.decoder_config.num_hidden_layers
    layers = options.target_layers or default_target_layers(L)
    answers = greedy_answers(planner, observations, options.answer_strategy, say)
    C = options.context
    feats = []
    t0 = time.perf_counter()
    for i, (obs, answer) in enumerate(zip(observations, answers, strict=True)):
        feats.append(target_features(planner, obs, answer, layers, C))
        if (i + 1) % 25 == 0 or i + 1 == len(observations):
            say(
                f"train-drafter: {i + 1}/{len(answers)} feature passes ({time.perf_counter() - t0:.0f} s)"
            )
    features = torch.stack(feats)  # (N, C + A, F)
    valid = np.ones(features.shape[:2], dtype=bool)
    if planner.prompt_len < C:
        valid[:, : C - planner.prompt_len] = False
    return Distilled(answers, features, valid)


def windows(scaffold, rng: np.random.Generator) -> list[tuple[int, int]]:
    """The windows [w, e) a spec decode may verify: from each answer position w to its
    block's end (when an editable slot follows w), and one shorter cut of it."""
    editable = np.asarray(scaffold.is_editable)
    A = len(editable)
    out = []
    for w in range(A - 1):
        e = block_end_at(scaffold, w)
        later = np.flatnonzero(editable[w + 1 : e])
        if not len(later):
            continue
        out.append((w, e))
        if len(later) > 1:
            cap = int(rng.integers(1, len(later)))  # 1 .. n-1 unknown slots
            out.append((w, w + 2 + int(later[cap - 1])))
    return out


def _batch(
    data: Distilled,
    items: np.ndarray,  # (b, 3): sample, w, e
    editable: np.ndarray,
    vocab_index: np.ndarray,  # (V,) id -> index in vocab, -1 outside
    width: int,
    C: int,
):
    b = len(items)
    tokens = np.zeros((b, width), dtype=np.int64)
    unknown = np.zeros((b, width), dtype=bool)
    keys = np.zeros((b, C + width), dtype=bool)
    targets = np.full((b, width), -100, dtype=np.int64)
    feats = torch.empty(b, C, data.features.shape[-1])
    for k, (n, w, e) in enumerate(items.tolist()):
        W = e - w
        row = data.answers[n, w:e]
        tokens[k, :W] = row
        u = editable[w:e].copy()
        u[0] = False  # the token at w is known when its window starts
        unknown[k, :W] = u
        keys[k, :C] = data.valid[n, w : w + C]
        keys[k, C : C + W] = True
        idx = vocab_index[row]
        targets[k, :W] = np.where(u & (idx >= 0), idx, -100)
        feats[k] = data.features[n, w : w + C]
    return (
        feats,
        torch.from_numpy(tokens),
        torch.from_numpy(unknown),
        torch.from_numpy(keys),
        torch.from_numpy(targets),
    )


def accepted_prefix(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    """(token accuracy, mean slots accepted before the first wrong draft) of a batch."""
    pred = logits.argmax(dim=-1)
    scored = targets >= 0
    right = (pred == targets) | ~scored
    accuracy = float(((pred == targets) & scored).sum() / scored.sum().clamp(min=1))
    wrong = (~right).int()
    first = torch.where(wrong.any(dim=1), wrong.argmax(dim=1), torch.full_like(wrong[:, 0], 10**6))
    counts = [(scored[i, : int(first[i])].sum()).item() for i in range(len(first))]
    return accuracy, float(np.mean(counts)) if counts else 0.0


def train_drafter(
    planner,
    observations: Sequence,
    options: DrafterOptions = DrafterOptions(),
    say: Progress = print,
    data: Distilled | None = None,
) -> tuple[Drafter, dict]:
    """A drafter for `planner`'s decoder, trained on its greedy answers to `observations`
    (or on `data` from `distill`); returns it bound to the decoder, and a report."""
    torch.manual_seed(options.seed)
    rng = np.random.default_rng(options.seed)
    data = data or distill(planner, observations, options, say)
    scaffold = planner.scaffold
    editable = np.asarray(scaffold.is_editable)
    decoder = planner.model.decoder
    tc = decoder.config
    layers = options.target_layers or default_target_layers(tc.num_hidden_layers)
    vocab = sorted(set(data.answers[:, editable].ravel().tolist()))
    vocab_index = np.full(tc.vocab_size, -1, dtype=np.int64)
    vocab_index[vocab] = np.arange(len(vocab))
    config = DrafterConfig(
        target_hidden_size=tc.hidden_size,
        target_vocab_size=tc.vocab_size,
        target_num_layers=tc.num_hidden_layers,
        target_layers=layers,
        target_sha256=decoder_sha256(decoder),
        vocab=tuple(vocab),
        hidden_size=options.hidden_size,
        intermediate_size=options.intermediate_size,
        num_layers=options.num_layers,
        num_heads=options.num_heads,
        context=options.context,
    )
    drafter = Drafter(config).reset_parameters(options.seed)
    drafter.bind(decoder, check=False)
    drafter.to(torch.float32)
    drafter.embed_table = drafter.embed_table.float()
    drafter.head = drafter.head.float()
    N = len(data.answers)
    n_val = int(round(N * options.val_fraction)) if N > 1 else 0
    order = rng.permutation(N)
    val_ids, train_ids = order[:n_val], order[n_val:]
    spans = windows(scaffold, rng)
    width = max(e - w for w, e in spans)

    def items_of(ids: np.ndarray) -> np.ndarray:
        return np.array([(n, w, e) for n in ids for w, e in spans], dtype=np.int64)

    train_items, val_items = items_of(train_ids), items_of(val_ids)
    say(
        f"train-drafter: {len(train_ids)} answers ({len(train_items)} windows) for training, "
        f"{len(val_ids)} held out; vocabulary {len(vocab)} ids; "
        f"{drafter.num_parameters()} parameters"
    )
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay)
    C = options.context
    drafter.train()
    t0 = time.perf_counter()
    for step in range(options.steps):
        lr = options.lr * 0.5 * (1 + math.cos(math.pi * step / options.steps))
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50)
        pick = train_items[rng.integers(0, len(train_items), options.batch_size)]
        feats, tokens, unknown, keys, targets = _batch(data, pick, editable, vocab_index, width, C)
        logits = drafter(feats, tokens, unknown, keys)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 100 == 0 or step + 1 == options.steps:
            say(
                f"train-drafter: step {step + 1}/{options.steps} loss {loss.item():.4f} "
                f"({time.perf_counter() - t0:.0f} s)"
            )
    drafter.eval()
    report = {
        "answers": N,
        "train_answers": len(train_ids),
        "val_answers": len(val_ids),
        "vocab": len(vocab),
        "parameters": drafter.num_parameters(),
        "steps": options.steps,
        "final_loss": round(float(loss.item()), 4),
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    if len(val_items):
        with torch.no_grad():
            accs, prefixes = [], []
            for i in range(0, len(val_items), 256):
                batch = _batch(data, val_items[i : i + 256], editable, vocab_index, width, C)
                feats, tokens, unknown, keys, targets = batch
                acc, prefix = accepted_prefix(drafter(feats, tokens, unknown, keys), targets)
                accs.append(acc)
                prefixes.append(prefix)
        report["val_token_accuracy"] = round(float(np.mean(accs)), 4)
        report["val_mean_accepted_prefix"] = round(float(np.mean(prefixes)), 3)
    weight = next(decoder.parameters())
    drafter.bind(decoder, check=False)  # back at the target's dtype
    drafter.to(weight.dtype)
    object.__setattr__(drafter.config, "extra", dict(report))
    return drafter, report
