"""Tokenizers behind `layout.Tokenizer`: any Hugging Face `tokenizer.json`, and our own.

`JsonTokenizer` wraps a `tokenizers.Tokenizer` loaded from a `tokenizer.json` as is, so a
published Qwen2 / Qwen2.5-VL checkpoint's tokenizer works unchanged (`load_tokenizer`).
`train_tokenizer` trains our own byte-level BPE with the same pre-tokenization as Qwen2
(its split pattern puts every digit in its own piece, so digits are always single tokens and
fixed-width numbers have a fixed token count) and the special tokens in `SPECIAL_TOKENS`,
named as in Qwen2.5-VL. Special tokens are looked up by name (`token_id`), never by integer.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The special tokens of our tokenizers, by name. The chat and image markers are Qwen2.5-VL's.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "<|MASK|>",
    "<|NULL|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|image_pad|>",
    "<|vision_end|>",
)

# Qwen2's pre-tokenizer split pattern: words with one leading non-letter, single digits,
# punctuation runs, newlines, spaces.
QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

DEFAULT_TOKENIZER_FILE = "default_tokenizer.json"


class JsonTokenizer:
    """A `layout.Tokenizer` over a `tokenizers.Tokenizer` (one `tokenizer.json`).

    encode adds no special tokens (no BOS/EOS) but maps special-token text in the input to
    its id; decode keeps special tokens.
    """

    def __init__(self, backend: Tokenizer) -> None:
        self.backend = backend

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_id(self, name: str) -> int:
        token_id = self.backend.token_to_id(name)
        if token_id is None:
            raise KeyError(f"tokenizer has no token {name!r}")
        if self.encode(name) != [token_id]:
            raise KeyError(f"token {name!r} does not encode to the single id {token_id}")
        return int(token_id)

    def save(self, path: str | Path) -> None:
        """Write `tokenizer.json` (pretty-printed, so diffs of a shipped file stay readable)."""
        Path(path).write_text(self.backend.to_str(pretty=True) + "\n")

    def to_str(self) -> str:
        return self.backend.to_str(pretty=True)


def load_tokenizer(path: str | Path) -> JsonTokenizer:
    """Load any Hugging Face `tokenizer.json` as is."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        return JsonTokenizer(Tokenizer.from_file(str(path)))
    except Exception as e:  # the library raises a bare Exception on bad files
        raise ValueError(f"cannot load tokenizer from {path}: {e}") from e


def load_tokenizer_text(text: str) -> JsonTokenizer:
    """A tokenizer from the text of a `tokenizer.json` (already read and checked)."""
    try:
        return JsonTokenizer(Tokenizer.from_str(text))
    except Exception as e:  # the library raises a bare Exception on bad files
        raise ValueError(f"not a tokenizer: {e}") from e


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    path: str | Path | None = None,
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS,
) -> JsonTokenizer:
    """Train our byte-level BPE on `texts`; write it to `path` (a tokenizer.json) if given.

    The vocabulary holds the special tokens (ids 0.. in order), the 256 byte symbols and
    merges up to `vocab_size`. Training is deterministic for a given corpus and settings.
    """
    min_size = len(special_tokens) + 256
    if vocab_size < min_size:
        raise ValueError(f"vocab_size={vocab_size}: must be >= {min_size} (specials + bytes)")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = JsonTokenizer(tokenizer)
    if path is not None:
        wrapped.save(path)
    return wrapped


def default_tokenizer_path() -> Path:
    """The shipped tokenizer (package data), made by `corpus.build_default_tokenizer`."""
    return Path(str(resources.files("blockplan.schema") / DEFAULT_TOKENIZER_FILE))


def default_tokenizer() -> JsonTokenizer:
    """Load the shipped default tokenizer."""
    return load_tokenizer(default_tokenizer_path())
