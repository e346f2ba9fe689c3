"""Section references into docs/ALGORITHMS.md and docs/DESIGN.md point at sections that exist,
and nothing refers to design notes outside the repository."""

import re
from pathlib import Path

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
