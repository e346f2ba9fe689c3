"""`blockplan schema`: the answer scaffold per section (editable / scaffold tokens, blocks),
next to Fast-dDrive's published counts; optionally train a tokenizer first."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from blockplan.schema import (
    DEFAULT_BLOCK_SIZE,
    DrivingSchema,
    SchemaError,
    build_default_tokenizer,
    compile_scaffold,
    default_tokenizer,
    load_tokenizer,
    train_tokenizer,
)
from blockplan.schema.corpus import DEFAULT_VOCAB_SIZE

# docs/ALGORITHMS.md §2: Fast-dDrive's schema with Qwen2.5-VL's tokenizer, d = 32.
FAST_DDRIVE_COUNTS = {
    "critical_objects": (12, 80, 1),
    "explanation": (192, 6, 6),
    "future_meta_behavior": (6, 18, 1),
    "trajectory": (70, 20, 3),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tokenizer", help="a tokenizer.json (or a folder holding one); default: the shipped one"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help=f"decoding block size d (default {DEFAULT_BLOCK_SIZE})",
    )
    parser.add_argument(
        "--explanation-budget",
        type=int,
        default=DrivingSchema().explanation_budget,
        help="explanation tokens (default: our reference schema's; Fast-dDrive uses 192)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--train-tokenizer",
        metavar="OUT",
        help="first train our byte-level BPE and write it to OUT (a tokenizer.json), then "
        "report the scaffold for it",
    )
    parser.add_argument(
        "--corpus",
        help="with --train-tokenizer: a UTF-8 text file, one training text per line "
        "(default: the generated schema corpus, which reproduces the shipped tokenizer)",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_VOCAB_SIZE,
        help=f"with --train-tokenizer: vocabulary size (default {DEFAULT_VOCAB_SIZE})",
    )


def _tokenizer(args: argparse.Namespace):
    if args.train_tokenizer:
        if args.corpus:
            lines = Path(args.corpus).read_text(encoding="utf-8").splitlines()
            return train_tokenizer(
                [ln for ln in lines if ln], args.vocab_size, args.train_tokenizer
            )
        return build_default_tokenizer(args.train_tokenizer, args.vocab_size)
    if args.tokenizer:
        return load_tokenizer(args.tokenizer)
    return default_tokenizer()


def report(args: argparse.Namespace) -> dict:
    """The JSON document `blockplan schema --json` prints."""
    schema = DrivingSchema(explanation_budget=args.explanation_budget)
    tokenizer = _tokenizer(args)
    scaffold = compile_scaffold(schema, tokenizer, args.block_size)
    sections = []
    for s in scaffold.sections:
        editable, frozen, blocks = FAST_DDRIVE_COUNTS[s.name]
        sections.append(
            {
                "name": s.name,
                "editable_tokens": s.num_editable,
                "scaffold_tokens": (s.end - s.start) - s.num_editable,
                "blocks": sum(b.section == s.name for b in scaffold.blocks),
                "fast_ddrive": {
                    "editable_tokens": editable,
                    "scaffold_tokens": frozen,
                    "blocks": blocks,
                },
            }
        )
    num_editable = int(scaffold.is_editable.sum())
    return {
        "tokenizer": args.train_tokenizer or args.tokenizer or "default",
        "vocab_size": tokenizer.vocab_size,
        "block_size": args.block_size,
        "explanation_budget": schema.explanation_budget,
        "answer_tokens": len(scaffold),
        "editable_tokens": num_editable,
        "scaffold_fraction": round(1.0 - num_editable / len(scaffold), 4),
        "sections": sections,
    }


def _table(doc: dict) -> str:
    lines = [
        f"tokenizer {doc['tokenizer']} (vocab {doc['vocab_size']}), block size "
        f"{doc['block_size']}, {doc['answer_tokens']} answer tokens, "
        f"{doc['scaffold_fraction']:.0%} scaffold",
        f"{'section':<22}{'editable':>9}{'scaffold':>9}{'blocks':>7}   Fast-dDrive (d=32)",
    ]
    for s in doc["sections"]:
        ref = s["fast_ddrive"]
        lines.append(
            f"{s['name']:<22}{s['editable_tokens']:>9}{s['scaffold_tokens']:>9}{s['blocks']:>7}"
            f"   {ref['editable_tokens']}/{ref['scaffold_tokens']}/{ref['blocks']}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        doc = report(args)
    except (SchemaError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2) if args.json else _table(doc))
    return 0
