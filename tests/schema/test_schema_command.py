import json

from blockplan.cli import main
from blockplan.schema import SECTION_NAMES, load_tokenizer


def run_json(capsys, *args) -> dict:
    assert main(["-q", "schema", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_lists_the_four_sections_in_order(capsys):
    doc = run_json(capsys)
    assert [s["name"] for s in doc["sections"]] == list(SECTION_NAMES)
    counts = {s["name"]: (s["editable_tokens"], s["blocks"]) for s in doc["sections"]}
    assert counts == {
        "critical_objects": (12, 1),
        "explanation": (24, 1),
        "future_meta_behavior": (6, 1),
        "trajectory": (60, 2),
    }
    total = sum(s["editable_tokens"] + s["scaffold_tokens"] for s in doc["sections"])
    assert total == doc["answer_tokens"]
    assert doc["sections"][1]["fast_ddrive"] == {
        "editable_tokens": 192,
        "scaffold_tokens": 6,
        "blocks": 6,
    }


def test_block_size_and_budget(capsys):
    doc = run_json(capsys, "--block-size", "7", "--explanation-budget", "192")
    blocks = {s["name"]: s["blocks"] for s in doc["sections"]}
    assert blocks == {
        "critical_objects": 2,
        "explanation": 28,
        "future_meta_behavior": 1,
        "trajectory": 9,
    }


def test_table(capsys):
    assert main(["-q", "schema"]) == 0
    out = capsys.readouterr().out
    for name in SECTION_NAMES:
        assert name in out
    assert "12/80/1" in out


def test_train_then_report(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    words = "yes no keep stop accelerate decelerate lane_follow lane_change_left lane_change_right"
    corpus.write_text("\n".join((words + " turn_left turn_right straight").split() * 40))
    out = tmp_path / "tok.json"
    doc = run_json(
        capsys, "--train-tokenizer", str(out), "--corpus", str(corpus), "--vocab-size", "400"
    )
    assert doc["vocab_size"] == load_tokenizer(out).vocab_size <= 400
    again = run_json(capsys, "--tokenizer", str(out))
    assert again["sections"] == doc["sections"]


def test_bad_tokenizer_is_an_error(tmp_path, capsys):
    assert main(["schema", "--tokenizer", str(tmp_path / "nope.json")]) == 1
    assert "nope.json" in capsys.readouterr().err
    assert main(["schema", "--block-size", "0"]) == 1
    assert "block_size" in capsys.readouterr().err
