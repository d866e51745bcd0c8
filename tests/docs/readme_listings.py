#!/usr/bin/python3
# tests/docs/readme_listings.py: run by readme_listings, beside docs_listings.cmake (doc checks).
"""readme_listings.py REPO BUILD_DIR CC PSTATE_CLI — the C listings of README.md (and of the guides
under docs/, where a listing may move with its text) are programs a user can copy (issue 31 items
3, 4): every ```c block that has `int main(` is compiled as it
stands with -std=c99 -O2 -Wall -Wextra -Wpedantic -Werror against the source tree's header, and
run: a listing that calls pstate_init under `pstate run -n 4` (it checks its own results and exits
non-zero when one is wrong), a dlopen listing (header only, no -lpstate) with the build tree on
LD_LIBRARY_PATH. Exit 1 naming the listing (its file and first line) and the compiler's or
program's output; 1 also when fewer than two such listings are found."""
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def main(repo: Path, build: Path, cc: str, cli: str) -> int:
    failed, checked = 0, 0
    docs = [repo / "README.md"] + sorted((repo / "docs").rglob("*.md"))
    listings = [(doc.relative_to(repo), doc.read_text(), m) for doc in docs
                for m in re.finditer(r"```c\n(.*?)```", doc.read_text(), re.S)]
    with tempfile.TemporaryDirectory(prefix="pstate-readme-") as tmp:
        for name, text, m in listings:
            code = m.group(1)
            if "int main(" not in code:
                continue
            line = text.count("\n", 0, m.start()) + 2
            checked += 1
            stem = f"{str(name).replace('/', '_').replace('.', '_')}_{line}"
            src, exe = Path(tmp) / f"{stem}.c", Path(tmp) / stem
            src.write_text(code)
            dlopen = "dlopen(" in code
            cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror", f"-I{repo / 'include'}",
                   str(src), "-o", str(exe)]
            cmd += ["-ldl"] if dlopen else [f"-L{build}", "-lpstate", f"-Wl,-rpath,{build}"]
            built = subprocess.run(cmd, capture_output=True, text=True)
            if built.returncode != 0:
                print(f"{name}:{line}: the listing does not compile cleanly:\n{' '.join(cmd)}\n{built.stderr}")
                failed += 1
                continue
            run = [str(exe)] if dlopen else [cli, "run", "-n", "4", "--", str(exe)]
            env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(build)} if dlopen else None
            ran = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
            if ran.returncode != 0:
                print(f"{name}:{line}: the listing compiled but failed ({ran.returncode}):\n{ran.stdout}{ran.stderr}")
                failed += 1
                continue
            print(f"{name}:{line}: compiled with -Wpedantic -Werror and ran:\n{ran.stdout}", end="")
    print(f"readme_listings: {checked} C programs checked, {failed} failed")
    return 1 if failed or checked < 2 else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
