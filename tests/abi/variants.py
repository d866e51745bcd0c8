#!/usr/bin/env python3
"""variants.py — the patched copies of the source that tests/abi/test_gate.sh feeds to abi/check.sh.

Each variant is one change to pstate's ABI, made the way a developer would make it (header,
dlopen table, definition and version script kept consistent, so it compiles), and the gate's
expected answer: REFUSED (abi/check.sh exits 1), PASSES (exits 0) or BUMPED (exits 0 saying the
SONAME was bumped and the baseline must be regenerated).

  variants.py list              one line per variant: NAME EXPECTED DESCRIPTION
  variants.py apply NAME DIR    patch the copy of the source in DIR (src/, include/, cmake/,
                                CMakeLists.txt) for variant NAME

Patches are regular expressions over the current source; one that no longer matches (the header
changed shape) fails loudly naming the variant, so the test is fixed instead of passing vacuously.
"""
import pathlib
import re
import sys

HEADER = "include/pstate/pstate.h"
TABLE = "src/api/api_table.cpp"


class PatchError(Exception):
    pass


def sub(root, path, pattern, repl, count=1, flags=re.M):
    """Replaces pattern in root/path; exactly `count` matches must exist (None: at least one)."""
    f = pathlib.Path(root, path)
    text = f.read_text()
    new, n = re.subn(pattern, repl, text, flags=flags)
    if n == 0 or (count is not None and n != count):
        raise PatchError(f"{path}: /{pattern}/ matched {n} times, expected {count or 'some'}")
    f.write_text(new)


def sub_all(root, pattern, repl, at_least):
    """Replaces pattern in the header and every src/ file; at least `at_least` matches in all."""
    total = 0
    for f in [pathlib.Path(root, HEADER)] + sorted(pathlib.Path(root, "src").rglob("*.[ch]pp")):
        text = f.read_text()
        new, n = re.subn(pattern, repl, text, flags=re.M)
        if n:
            f.write_text(new)
            total += n
    if total < at_least:
        raise PatchError(f"/{pattern}/ matched {total} times in {HEADER} and src/, expected >= {at_least}")


# ---- breaking changes: the gate must refuse each ------------------------------------------------

def param_type_changed(root):
    # pstate_grow(pstate_t *ps, int64_t timeout_ms) -> int timeout_ms: declaration, the table's
    # member and the definition (a narrower parameter: callers pass 8 bytes where 4 are read)
    sub_all(root, r"(grow\)?\(\s*pstate_t\s*\*\s*ps,\s*)int64_t(\s+timeout_ms\s*\))", r"\1int\2", at_least=3)


def function_removed(root):
    # pstate_barrier no longer exported (kept out of the version script): gone for every caller
    sub(root, "cmake/pstate.map", r"^(\s*)local:\s*\n", r"\1local:\n\1  pstate_barrier;\n")


def table_member_removed(root):
    # pstate_api_t loses its member `barrier`: every later member of the table moves up
    sub(root, HEADER, r"^\s*pstate_status_t \(\*barrier\)\(pstate_group_t \*g\);\n", "")
    sub(root, TABLE, r"^\s*t\.barrier = pstate_barrier;\n", "")


def members_reordered(root):
    # pstate_parallel_config_t: tensor_parallel_size and pipeline_parallel_size swap places
    sub(root, HEADER, r"^(\s*int tensor_parallel_size;[^\n]*\n)(\s*int pipeline_parallel_size;[^\n]*\n)", r"\2\1")


def member_retyped(root):
    # pstate_p2p_op_t (passed as an array): count becomes an int
    sub(root, HEADER, r"(struct pstate_p2p_op_t \{[^}]*?)\bsize_t count;", r"\1int count;")


def enumerator_renumbered(root):
    # PSTATE_ERR_AUTH 9 -> 99: a program built against 1.0 no longer recognises the status
    sub(root, HEADER, r"(\bPSTATE_ERR_AUTH\s*=\s*)9\b", r"\g<1>99")


def appended_to_struct_without_struct_size(root):
    # pstate_bytes_t (filled by the library in the caller's memory) gains a member
    sub(root, HEADER, r"(struct pstate_bytes_t \{[^}]*?size_t size;\n)", r"\1  int gate_probe;\n")


def reordered_and_appended(root):
    # an append where appending is allowed does not hide a reorder in the same struct
    members_reordered(root)
    member_appended_to_struct_size_struct(root)


# ---- additions: the gate must let them through ---------------------------------------------------

def function_added(root):
    # a new entry point: declared, appended to the dlopen table, filled in, defined
    sub(root, HEADER, r"^(PSTATE_API pstate_status_t pstate_grow\([^;]*;\n)",
        r"\1PSTATE_API pstate_status_t pstate_gate_probe_added(pstate_t *ps, int value);\n")
    sub(root, HEADER, r"(struct pstate_api_t \{.*?\n)(\};\n)",
        r"\1  pstate_status_t (*gate_probe_added)(pstate_t *ps, int value);\n\2", flags=re.S)
    sub(root, TABLE, r"^(\s*)return t;\n", r"\1t.gate_probe_added = pstate_gate_probe_added;\n\1return t;\n")
    pathlib.Path(root, "src/api/api_gate_probe.cpp").write_text(
        '// api_gate_probe.cpp — a function added by tests/abi/variants.py (function_added).\n'
        '#include "api/boundary.hpp"\n\n'
        'extern "C" PSTATE_API pstate_status_t pstate_gate_probe_added(pstate_t *ps, int value) {\n'
        '  (void)ps;\n  (void)value;\n  return PSTATE_OK;\n}\n')


def enumerator_appended(root):
    # a new status after the last one (as PSTATE_ERR_BUSY will be)
    f = pathlib.Path(root, HEADER)
    text = f.read_text()
    m = re.search(r"typedef enum pstate_status_t[^{]*\{(.*?)\} pstate_status_t;", text, re.S)
    if not m:
        raise PatchError(f"{HEADER}: no pstate_status_t enumeration")
    last = list(re.finditer(r"\b(PSTATE_\w+)\s*=\s*(\d+)", m.group(1)))[-1]
    at = m.start(1) + last.end()
    text = text[:at] + f", PSTATE_ERR_GATE_PROBE = {int(last.group(2)) + 1}" + text[at:]
    f.write_text(text)


def member_appended_to_struct_size_struct(root):
    # pstate_parallel_config_t (struct_size first) gains a member at its end
    sub(root, HEADER, r"(struct pstate_parallel_config_t \{[^}]*?\n)(\} pstate_parallel_config_t;)",
        r"\1  int gate_probe_size;\n\2")


def private_type_changed(root):
    # the library's own definition of the opaque pstate_layout_t grows: not part of the ABI
    sub(root, "src/api/api_layout.cpp", r"(struct pstate_layout_s \{[^}]*?\n)(\};)", r"\1  int gate_probe_private = 0;\n\2")


# ---- a deliberate break with its SONAME bump ------------------------------------------------------

def soname_bumped(root):
    enumerator_renumbered(root)
    major = int(re.search(r"^#define PSTATE_VERSION_MAJOR (\d+)$", pathlib.Path(root, HEADER).read_text(), re.M).group(1))
    sub(root, HEADER, r"^#define PSTATE_VERSION_MAJOR \d+$", f"#define PSTATE_VERSION_MAJOR {major + 1}")
    sub(root, "CMakeLists.txt", r"^project\(pstate VERSION \d+\.", f"project(pstate VERSION {major + 1}.")


VARIANTS = [
    ("param_type_changed", "REFUSED", param_type_changed, "pstate_grow's int64_t timeout_ms becomes int"),
    ("function_removed", "REFUSED", function_removed, "pstate_barrier is no longer exported"),
    ("table_member_removed", "REFUSED", table_member_removed, "pstate_api_t loses its member barrier"),
    ("members_reordered", "REFUSED", members_reordered, "pstate_parallel_config_t: tp and pp swap places"),
    ("member_retyped", "REFUSED", member_retyped, "pstate_p2p_op_t.count becomes an int"),
    ("enumerator_renumbered", "REFUSED", enumerator_renumbered, "PSTATE_ERR_AUTH becomes 99"),
    ("appended_to_struct_without_struct_size", "REFUSED", appended_to_struct_without_struct_size,
     "pstate_bytes_t gains a member"),
    ("reordered_and_appended", "REFUSED", reordered_and_appended,
     "pstate_parallel_config_t: tp and pp swap, a member is appended"),
    ("function_added", "PASSES", function_added, "pstate_gate_probe_added, appended to the table"),
    ("enumerator_appended", "PASSES", enumerator_appended, "a status after the last one"),
    ("member_appended_to_struct_size_struct", "PASSES", member_appended_to_struct_size_struct,
     "pstate_parallel_config_t gains a member at its end"),
    ("private_type_changed", "PASSES", private_type_changed,
     "the library's definition of the opaque pstate_layout_t gains a member"),
    ("soname_bumped", "BUMPED", soname_bumped, "PSTATE_ERR_AUTH becomes 99 and the major goes up"),
]


def main(argv):
    if len(argv) == 2 and argv[1] == "list":
        for name, expected, _, text in VARIANTS:
            print(name, expected, text)
        return 0
    if len(argv) == 4 and argv[1] == "apply":
        for name, _, patch, _ in VARIANTS:
            if name == argv[2]:
                try:
                    patch(argv[3])
                except PatchError as e:
                    print(f"variants.py: variant {name} no longer applies to this source: {e}", file=sys.stderr)
                    return 1
                return 0
        print(f"variants.py: no variant {argv[2]}", file=sys.stderr)
        return 2
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
