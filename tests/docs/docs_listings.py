#!/usr/bin/python3
# tests/docs/docs_listings.py: run by docs_listings, beside docs_listings.cmake (the doc checks).
"""docs_listings.py REPO — every code block of docs/bindings.md whose first line is a comment
naming an example file ("# bindings/python/examples/two_ranks.py", "// bindings/rust/...rs") must
be that file, less the file's head comment (a module docstring or //! lines) and blank lines
around it. A listing marked "(abridged)" is skipped. Exit 1 naming the first differing line."""
import re
import sys
from pathlib import Path


def body(path: Path) -> list:
    lines = path.read_text().splitlines()
    if path.suffix == ".py" and lines and lines[0].startswith('"""'):
        end = next(i for i, line in enumerate(lines[1:], 1) if line.rstrip().endswith('"""'))
        lines = lines[end + 1:]
    elif path.suffix == ".rs":
        lines = [line for line in lines if not line.startswith("//!")]
    while lines and not lines[0].strip():
        lines.pop(0)
    return lines


def main(repo: Path) -> int:
    doc = (repo / "docs" / "bindings.md").read_text()
    checked, failed = 0, 0
    for block in re.findall(r"```\w+\n(.*?)```", doc, re.S):
        first, *rest = block.rstrip("\n").splitlines()
        named = re.match(r"(?:#|//) (bindings/\S+\.(?:py|rs|go))( \(abridged\))?$", first)
        if not named or named.group(2):
            continue
        checked += 1
        want = body(repo / named.group(1))
        for i, (got, expected) in enumerate(zip(rest, want)):
            if got != expected:
                print(f"docs/bindings.md, listing of {named.group(1)}, line {i + 2}:\n  docs: {got!r}\n  file: {expected!r}")
                failed += 1
                break
        else:
            if len(rest) != len(want):
                print(f"docs/bindings.md, listing of {named.group(1)}: {len(rest)} lines, the file has {len(want)}")
                failed += 1
    print(f"docs_listings: {checked} listings checked, {failed} differ")
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
