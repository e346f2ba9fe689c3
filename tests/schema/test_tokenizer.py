import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockplan.schema import (
    SPECIAL_TOKENS,
    build_default_tokenizer,
    default_tokenizer_path,
    load_tokenizer,
    train_tokenizer,
)
from blockplan.schema.corpus import DEFAULT_VOCAB_SIZE

# Text the tokenizer must round-trip: any string without special-token text.
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80).filter(
    lambda s: "<|" not in s
)


def test_shipped_tokenizer_is_small_and_has_every_special_token(tokenizer):
    assert tokenizer.vocab_size == DEFAULT_VOCAB_SIZE
    ids = [tokenizer.token_id(name) for name in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS)
    for name, i in zip(SPECIAL_TOKENS, ids, strict=True):
        assert tokenizer.encode(f"a{name}b")[1] == i
        assert tokenizer.decode([i]) == name


def test_token_id_raises_naming_the_token(tokenizer):
    with pytest.raises(KeyError, match="<|NOPE|>"):
        tokenizer.token_id("<|NOPE|>")
    with pytest.raises(KeyError, match="lane_change_right"):
        tokenizer.token_id("lane_change_right")  # three tokens
    byte_symbol = tokenizer.backend.id_to_token(tokenizer.encode(" lead")[0])  # "Ġlead"
    with pytest.raises(KeyError, match="single id"):
        tokenizer.token_id(byte_symbol)  # in the vocabulary, but text that encodes otherwise


@pytest.mark.parametrize("text", ["+014.70", "-999.99", "0123456789", "x=12345.678, 2026"])
def test_digits_are_always_single_tokens(tokenizer, text):
    for token_id in tokenizer.encode(text):
        piece = tokenizer.decode([token_id])
        assert not (any(c.isdigit() for c in piece) and len(piece) > 1), piece


@settings(max_examples=200, deadline=None)
@given(text=TEXT)
def test_encode_decode_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_train_save_load(tmp_path):
    corpus = ["the lead vehicle is slowing down, so I decelerate 12.5 m"] * 50
    path = tmp_path / "tokenizer.json"
    trained = train_tokenizer(corpus, 300, path)
    loaded = load_tokenizer(path)
    assert json.loads(path.read_text())["model"]["type"] == "BPE"
    text = "the vehicle is slowing at 0.75 m/s^2 <|NULL|>"
    assert loaded.encode(text) == trained.encode(text)
    assert loaded.token_id("<|NULL|>") == trained.token_id("<|NULL|>")
    assert load_tokenizer(tmp_path).vocab_size == trained.vocab_size  # a folder works too


def test_train_rejects_tiny_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["abc"], 100)


def test_load_tokenizer_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="missing.json"):
        load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        load_tokenizer(bad)


def test_shipped_tokenizer_is_reproducible(tokenizer):
    """The package data is exactly what `build_default_tokenizer` makes (deterministic)."""
    rebuilt = build_default_tokenizer()
    shipped = json.loads(default_tokenizer_path().read_text())
    assert json.loads(rebuilt.to_str()) == shipped
