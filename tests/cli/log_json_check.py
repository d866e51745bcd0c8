#!/usr/bin/python3
"""log_json_check.py STDERR_FILE — checks the stderr of tests/cli/test_log_json.sh's JSON job.

Independently of the library's own formatting (Python's json module parses the lines):
every line is one JSON object with the keys time, level, rank, host, group, call, message and
status, of the documented types (docs/environment.md, PSTATE_LOG_FORMAT); both ranks log (rank 0
and 1); each rank logs its failed all_reduce of the world with group "world:0", call "all_reduce"
and status "PSTATE_ERR_MISMATCH"; the launcher's lines are there with rank null, among them an
ERROR naming rank 1's exit status. Prints what is wrong; exits 1 then.
"""
import json
import re
import sys

KEYS = {"time", "level", "rank", "host", "group", "call", "message", "status"}
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LEVELS = {"ERROR", "WARN", "INFO", "TRACE"}


def main(path):
    problems = []
    records = []
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        problems.append("no stderr lines at all")
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line.decode("utf-8"))  # strict: invalid UTF-8 fails too
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            problems.append(f"line {n} is not JSON ({e}): {line[:200]!r}")
            continue
        if not isinstance(r, dict):
            problems.append(f"line {n} is not an object: {line[:200]!r}")
            continue
        if set(r) != KEYS:
            problems.append(f"line {n} has keys {sorted(r)}, not {sorted(KEYS)}")
            continue
        ok = (isinstance(r["time"], str) and TIME.match(r["time"]) and r["level"] in LEVELS
              and (r["rank"] is None or (isinstance(r["rank"], int) and r["rank"] >= 0))
              and all(r[k] is None or (isinstance(r[k], str) and r[k]) for k in ("host", "group", "call", "status"))
              and isinstance(r["message"], str) and r["message"])
        if not ok:
            problems.append(f"line {n} has a field of the wrong type or form: {r}")
        records.append(r)
    ranks = {r["rank"] for r in records}
    for rank in (0, 1):
        if rank not in ranks:
            problems.append(f"no line of rank {rank}")
        failed = [r for r in records if r["rank"] == rank and r["status"] == "PSTATE_ERR_MISMATCH"
                  and r["group"] == "world:0" and r["call"] == "all_reduce" and r["level"] == "INFO"]
        if not failed:
            problems.append(f"rank {rank}: no INFO line of the failed all_reduce with group, call and status")
    launcher = [r for r in records if r["rank"] is None and r["message"].startswith("pstate run: ")]
    if not any(r["level"] == "ERROR" and "rank 1 exited with status 3" in r["message"] for r in launcher):
        problems.append("no ERROR line of the launcher naming rank 1's exit status 3")
    if not all(r["host"] for r in records):
        problems.append("a line without its host")
    for p in problems:
        print("log_json_check:", p)
    print(f"log_json_check: {len(lines)} lines, {len(records)} JSON records, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
