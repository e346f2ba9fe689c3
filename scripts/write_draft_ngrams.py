"""Write a model folder's answer n-gram table (draft_ngrams.json, decoding/ngrams.py) from a
data set's training answers, and rewrite its manifest. `blockplan train` writes the table
into every folder it saves; this adds it to a folder trained before it did.

    python scripts/write_draft_ngrams.py --model models/blockplan-tiny --data BASE
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from blockplan.decoding.ngrams import draft_files, text_sections
from blockplan.model.weights import write_manifest
from blockplan.train.evaluate import recipe_of_folder
from blockplan.train.examples import load_shards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the model folder to add the table to")
    parser.add_argument("--data", required=True, help="a `blockplan dataset` folder")
    args = parser.parse_args(argv)
    recipe = recipe_of_folder(args.model)
    train = load_shards(args.data, "train", recipe, with_images=False)
    sections = text_sections(recipe.scaffold, recipe.schema, recipe.tokenizer)
    files = draft_files(recipe.scaffold, train.answer_ids, sections)
    if not files:
        print(f"error: {args.model}: no free-text section to draft", file=sys.stderr)
        return 1
    for name, text in files.items():
        (Path(args.model) / name).write_text(text)
        print(f"{Path(args.model) / name}: sections {sections}, {len(train)} answers")
    write_manifest(args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
