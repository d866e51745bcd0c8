#!/usr/bin/python3
# tests/docs/docs_links.py: run by docs_links, beside docs_listings.cmake (the doc checks).
"""docs_links.py REPO — every relative link of every tracked Markdown file resolves (issue 41).

For each `[text](target)` and `![alt](target)` outside code (fenced blocks and `inline code` are
skipped) whose target is not a URL (scheme://, mailto:): the path, taken relative to the file
that links (or to the repository root when it starts with /), must exist in the checkout, and a
`#anchor` into a Markdown file (or into the file itself) must name one of its headings as GitHub
slugs them (lower case, punctuation but - and _ dropped, spaces to -, -N for repeats). The files
are those git tracks or would track (`git ls-files --cached --others --exclude-standard`), else
every .md under REPO but build folders. Exit 1
listing each broken link as FILE:LINE: target (why); 1 also when no link was checked."""
import re
import subprocess
import sys
from pathlib import Path

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_files(repo: Path) -> list:
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], capture_output=True, text=True, check=True)
        files = [repo / line for line in out.stdout.splitlines() if line]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    return [p for p in repo.rglob("*.md") if not any(part.startswith(("build", ".")) for part in p.relative_to(repo).parts)]


def prose_lines(text: str):
    """(line number, line without inline code) of every line outside fenced code blocks."""
    for n, line in prose_lines_keep_code(text):
        yield n, re.sub(r"(`+)(?:(?!\1).)+\1", "", line)


def slug(heading: str) -> str:
    s = re.sub(r"<[^>]+>", "", heading.strip().lower())
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)  # a link in a heading: its text
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path: Path, cache: dict) -> set:
    if path not in cache:
        seen, out = {}, set()
        for _, line in prose_lines_keep_code(path.read_text(errors="replace")):
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                k = seen.get(base, 0)
                seen[base] = k + 1
                out.add(base if k == 0 else f"{base}-{k}")
        cache[path] = out
    return cache[path]


def prose_lines_keep_code(text: str):
    """Lines outside fenced blocks, inline code kept (a heading's `code` stays in its slug)."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence = None if fence == m.group(1) else (fence or m.group(1))
            continue
        if fence is None:
            yield n, line


def main(repo: Path) -> int:
    repo = repo.resolve()
    cache, broken, checked = {}, [], 0
    for md in markdown_files(repo):
        if not md.exists():
            continue
        for n, line in prose_lines(md.read_text(errors="replace")):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                checked += 1
                path_part, _, anchor = target.partition("#")
                dest = md if not path_part else ((repo / path_part.lstrip("/")) if path_part.startswith("/")
                                                  else (md.parent / path_part))
                where = f"{md.relative_to(repo)}:{n}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest, cache):
                    broken.append(f"{where} (no heading '{anchor}' in {dest.relative_to(repo)})")
                elif dest.resolve() != repo and repo not in dest.resolve().parents:
                    broken.append(f"{where} (outside the repository)")
    for b in broken:
        print(b)
    print(f"docs_links: {checked} relative links checked, {len(broken)} broken")
    return 1 if broken or not checked else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
