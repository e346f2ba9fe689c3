"""Section references into docs/ALGORITHMS.md and docs/DESIGN.md point at sections that exist,
and nothing refers to design notes outside the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITED = ("ALGORITHMS", "DESIGN")
# `docs/ALGORITHMS.md §4.5`, `docs/DESIGN.md` §5 step 3, `docs/ALGORITHMS.md §1, §3`
REFERENCE = re.compile(r"docs/(ALGORITHMS|DESIGN)\.md`? ((?:§[\d.]+(?:, )?)+)")


def _texts():
    for folder in ("src", "tests", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".md") and "__pycache__" not in path.parts:
                yield path, path.read_text(encoding="utf-8")
    yield ROOT / "README.md", (ROOT / "README.md").read_text(encoding="utf-8")


def _sections(name: str) -> set[str]:
    text = (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")
    sections = set(re.findall(r"^## (\d+)\. ", text, flags=re.M))
    sections |= set(re.findall(r"^### (\d+\.\d+) ", text, flags=re.M))  # `### 7.1 Title`
    # numbered items of a section: `5. **`rollouts`**` in §4 is §4.5
    current = None
    for line in text.splitlines():
        if m := re.match(r"^## (\d+)\. ", line):
            current = m.group(1)
        elif current and (m := re.match(r"^(\d+)\. ", line)):
            sections.add(f"{current}.{m.group(1)}")
    return sections


def test_every_section_reference_exists():
    sections = {name: _sections(name) for name in CITED}
    found = 0
    for path, text in _texts():
        for name, refs in REFERENCE.findall(text):
            for ref in re.findall(r"§([\d.]+)", refs):
                found += 1
                assert ref.rstrip(".") in sections[name], f"{path}: docs/{name}.md §{ref}"
    assert found > 40


def test_references_name_the_docs_folder():
    bare = re.compile(r"(?<![/\w`])`?(ALGORITHMS|DESIGN)(\.md`? §| §)")  # a bare citation
    for path, text in _texts():
        if (path.parent.name == "docs" and path.stem in CITED) or path == Path(__file__):
            continue
        assert not bare.search(text), f"{path}: cite docs/ALGORITHMS.md or docs/DESIGN.md"
        # (../shared/ros2, the ROS 2 runtime CI installs, may be named; its notes may not)
        assert "../shared/docs" not in text and "../seeds" not in text, path


# What the repository says is the product as it is: no narration of how the work went (dated
# or numbered sessions, "this session", "we tried"), no issue numbers, and no folder that
# exists only on the machine that made a number (the runs folder beside a checkout).
_ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth"
)
NARRATION = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a numbered session": re.compile(rf"\b({_ORDINALS}) sessions?\b", re.I),
    "a session or round of work": re.compile(
        r"\b(this|last|previous|earlier|next|that) (session|round)\b", re.I
    ),
    "a late ordinal": re.compile(
        r"\b(eleventh|twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|"
        r"eighteenth|nineteenth|twentieth)\b",
        re.I,
    ),
    "'we tried'": re.compile(r"\bwe tried\b", re.I),
    "an issue number": re.compile(r"\bissues? #?\d+", re.I),
    # `#17` as a reference (not a colour such as `#222;` in the replay report's CSS)
    "an issue reference": re.compile(r"(?<![\w&/#])#\d+\b(?![;\"}])"),
    "a machine-local path": re.compile(
        r"/work/|\.\./runs\b|/scratch\b|scratch[ -](folder|runs|dir)"
    ),
}


def _product_files(group: str) -> list[Path]:
    if group == "docs":
        return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if group == "model cards":
        return sorted(ROOT.glob("models/*/MODEL_CARD.md"))
    if group == "src":
        return [p for p in sorted((ROOT / "src").rglob("*.py")) if "__pycache__" not in p.parts]
    return [p for p in sorted((ROOT / "scripts").iterdir()) if p.is_file()]


def _narration(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in NARRATION.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    return found


def test_the_narration_patterns_catch_what_they_are_for():
    caught = [
        "measured 2026-12-06 in the twelfth session",
        "as the first session showed",
        "this session's runs",
        "we tried a larger batch",
        "issue 17's target",
        "see #23",
        "python x.py --data /work/runs/base",
        "../runs/ego-v3",
    ]
    kept = [
        "body{background:#fafafa;color:#222}",
        "3 timed rounds after 1 warm-up",
        "a fifth of the period",
        "trained from scratch",
        "the second on-policy round",
    ]
    for text in caught:
        assert any(p.search(text) for p in NARRATION.values()), text
    for text in kept:
        assert not any(p.search(text) for p in NARRATION.values()), text


@pytest.mark.parametrize(
    "group",
    ["docs", "src", "scripts", "model cards"],
)
def test_no_narration_issue_numbers_or_machine_local_paths(group):
    paths = _product_files(group)
    assert paths, group
    found = _narration(paths)
    assert not found, "\n".join(found)


def test_benchmarks_and_readme_stay_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
    assert len((ROOT / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()) <= 800


def _cli_doc():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_doc", ROOT / "scripts" / "cli_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_reference_is_generated_from_the_parsers_and_current():
    """docs/CLI.md is what `make cli-doc` writes from the parsers of every command in
    `blockplan.cli.COMMANDS`: a changed flag or a new command makes it stale until
    regenerated."""
    from blockplan.cli import COMMANDS

    text = _cli_doc().render()
    for name in COMMANDS:
        assert f"## `blockplan {name}`" in text, name
    current = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    assert current == text, "docs/CLI.md is stale: run `make cli-doc`"


def test_the_command_reference_follows_a_new_command(monkeypatch):
    """The generator walks `COMMANDS`, so a command added there gets its section."""
    import blockplan.cli as cli

    doc = _cli_doc()
    monkeypatch.setitem(cli.COMMANDS, "config-again", "config")
    monkeypatch.setitem(cli.COMMAND_HELP, "config-again", "the config command twice")
    assert "## `blockplan config-again`" in doc.render()
    assert "the config command twice" in doc.render()
