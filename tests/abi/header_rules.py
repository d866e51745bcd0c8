#!/usr/bin/env python3
# tests/abi/header_rules.py: run by header_check_abi_rules (header_compile.cmake beside it).
"""header_rules.py — the ABI rules of pstate.h, checked against the header and a built library.

ctest `header_check_abi_rules` (tests/abi/header_compile.cmake). It reads
include/pstate/pstate.h (comments dropped) and checks, naming what breaks a rule:

  1. every struct defined in the header (each one crosses the boundary by pointer or in an
     array) starts with `size_t struct_size`, and every such struct but those the library alone
     fills (FILLED_BY_LIBRARY: the dlopen table, a hook's call info) has an
     initializer macro PSTATE_<NAME>_INIT that sets struct_size to its sizeof — except the
     structs of EXEMPT (with the reason) and PENDING (expected to fail until another branch lands;
     one that passes is reported, so the entry is deleted then);
  2. every PSTATE_API function is a member of the dlopen table pstate_api_t (member x is pstate_x,
     with the same type), pstate_get_api itself excepted, and every function member of the table
     is a declared function;
  3. every PSTATE_API function matches a `global:` pattern of cmake/pstate.map and no `local:`
     name, and the built library exports each of them under the version node PSTATE_<major>, and
     exports no pstate_* symbol the header does not declare;
  4. at run time: pstate_get_api(PSTATE_ABI_MAJOR) gives a table whose struct_size is its sizeof
     and whose every member is the exported function of its name; pstate_get_api of the major
     before is NULL.

The structural facts come from the compiler, not from this parser: the script writes a C++17
program with one static_assert per struct and per table member (offsetof(T, struct_size) == 0,
its type size_t; decltype(pstate_api_t::x) == decltype(&pstate_x)) and one run-time check per
table member and initializer, builds it against the library and runs it. The parser only lists
the names.

usage: header_rules.py SOURCE_DIR LIBRARY WORK_DIR CXX [CXXFLAGS...]
"""
import fnmatch
import pathlib
import re
import subprocess
import sys

# Structs with struct_size that only the library fills and hands out (a caller never builds one, so
# it has no initializer to fill from): the dlopen table, and a hook's pstate_call_info_t (whose
# struct_size says which fields the library filled).
FILLED_BY_LIBRARY = {"pstate_api_t", "pstate_call_info_t"}

# Structs that need no struct_size, and why.
EXEMPT = {
    "pstate_bytes_t": "an out-value pair {data, size}: pstate fills it and pstate_bytes_free frees "
                      "it; it is frozen for every 1.x (a field more would be a new type), so it needs "
                      "no struct_size, and abi/check.sh refuses any change to it",
}
# Structs expected to fail rule 1 until a branch in flight lands. A struct listed here that passes
# fails the test: delete its entry then.
PENDING = {}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def parse(header_text):
    code = strip_comments(header_text)
    no_pp = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#"))
    structs = {}  # name -> starts with size_t struct_size
    for m in re.finditer(r"\bstruct\s+(\w+)\s*\{", no_pp):
        structs[m.group(1)] = re.match(r"\s*size_t\s+struct_size\s*;", no_pp[m.end():]) is not None
    functions = re.findall(r"\bPSTATE_API\b[^;{]*?\b(pstate_\w+)\s*\(", no_pp)
    table = re.search(r"\bstruct\s+pstate_api_t\s*\{(.*?)\}\s*;", no_pp, re.S)
    members = re.findall(r"\(\s*\*\s*(\w+)\s*\)\s*\(", table.group(1)) if table else []
    macros = set(re.findall(r"^\s*#\s*define\s+(PSTATE_\w+_INIT)\b", code, re.M))
    return structs, functions, members, macros


def init_macro(struct):
    return "PSTATE_" + re.sub(r"^pstate_|_t$", "", struct).upper() + "_INIT"


def version_script(path):
    """(global patterns, local patterns, node names) of a version script."""
    text = strip_comments(path.read_text())
    nodes = re.findall(r"(\w+)\s*\{", text)
    glob, local, where = [], [], None
    for token in re.findall(r"global:|local:|[^\s;{}]+(?=\s*;)", text):
        if token in ("global:", "local:"):
            where = glob if token == "global:" else local
        elif where is not None:
            where.append(token)
    return glob, local, nodes


def exported(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        name = line.split()[-1]
        base, _, version = name.partition("@")
        if base.startswith("pstate_"):
            symbols[base] = version.lstrip("@")
    return symbols


def main(argv):
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    src, library, work, cxx, cxxflags = pathlib.Path(argv[1]), argv[2], pathlib.Path(argv[3]), argv[4], argv[5:]
    header = src / "include/pstate/pstate.h"
    text = header.read_text()
    structs, functions, members, macros = parse(text)
    major = int(re.search(r"^#define PSTATE_VERSION_MAJOR (\d+)$", text, re.M).group(1))
    errors, notes = [], []

    # 1. struct_size first
    checked_structs = []
    for name, has in sorted(structs.items()):
        if name in EXEMPT:
            notes.append(f"{name}: no struct_size needed: {EXEMPT[name]}")
            if has:
                errors.append(f"{name} is EXEMPT but starts with struct_size now: delete it from EXEMPT")
            continue
        if name in PENDING:
            if has:
                errors.append(f"{name} starts with struct_size now (it was expected to fail: {PENDING[name]}): "
                              f"delete its entry from PENDING in tests/abi/header_rules.py")
            else:
                notes.append(f"{name}: no struct_size yet, expected ({PENDING[name]})")
            continue
        if not has:
            errors.append(f"struct {name} does not start with `size_t struct_size;` (every struct of pstate.h "
                          f"crosses the boundary by pointer or in an array: a field appended later would "
                          f"break callers built against the old size)")
            continue
        checked_structs.append(name)
        if name not in FILLED_BY_LIBRARY and init_macro(name) not in macros:
            errors.append(f"struct {name} has no initializer macro {init_macro(name)} (filled from it first)")
    missing = [n for n in ("pstate_api_t", "pstate_init_params_t", "pstate_parallel_config_t",
                           "pstate_group_info_t", "pstate_p2p_op_t") if n not in structs]
    if missing:
        errors.append(f"the parser found no struct {', '.join(missing)} in {header}: fix parse()")

    # 2. every function in the table, every table member a function
    if not members:
        errors.append(f"no members of struct pstate_api_t found in {header}")
    declared = set(functions)
    in_table = set(members)
    for f in functions:
        if f != "pstate_get_api" and f[len("pstate_"):] not in in_table:
            errors.append(f"{f} is declared PSTATE_API but pstate_api_t has no member {f[len('pstate_'):]} "
                          f"(append it at the end of the table and fill it in src/api/api_table.cpp)")
    for m in members:
        if "pstate_" + m not in declared:
            errors.append(f"pstate_api_t member {m} has no function pstate_{m} declared PSTATE_API")
    table_members = [m for m in members if "pstate_" + m in declared]

    # 3. the version script and the library's exports
    glob, local, nodes = version_script(src / "cmake/pstate.map")
    if nodes != [f"PSTATE_{major}"]:
        errors.append(f"cmake/pstate.map has version nodes {nodes}, expected one, PSTATE_{major}")
    for f in functions:
        if not any(fnmatch.fnmatchcase(f, p) for p in glob):
            errors.append(f"{f} matches no global: pattern of cmake/pstate.map ({glob})")
        if f in local:
            errors.append(f"{f} is listed local: in cmake/pstate.map")
    symbols = exported(library)
    for f in functions:
        if f not in symbols:
            errors.append(f"{library} does not export {f}")
        elif symbols[f] != f"PSTATE_{major}":
            errors.append(f"{library} exports {f} under version '{symbols[f]}', not PSTATE_{major}")
    for s in sorted(set(symbols) - declared):
        errors.append(f"{library} exports {s}, which pstate.h does not declare PSTATE_API")

    # 1, 2, 4 by the compiler and at run time
    lines = ["// generated by tests/abi/header_rules.py: each line is one rule of pstate.h's ABI",
             "#include <pstate/pstate.h>", "#include <cstddef>", "#include <cstdio>", "#include <type_traits>",
             "static int bad = 0;",
             "#define FAIL(...) (std::fprintf(stderr, __VA_ARGS__), std::fputc('\\n', stderr), ++bad)"]
    for s in checked_structs:
        lines.append(f"static_assert(offsetof({s}, struct_size) == 0 && "
                     f"std::is_same<decltype({s}::struct_size), size_t>::value, \"{s} starts with size_t struct_size\");")
    for m in table_members:
        lines.append(f"static_assert(std::is_same<decltype(pstate_api_t::{m}), decltype(&pstate_{m})>::value, "
                     f"\"pstate_api_t::{m} has the type of pstate_{m}\");")
    lines += ["int main() {",
              "  const pstate_api_t *api = pstate_get_api(PSTATE_ABI_MAJOR);",
              "  if (api == nullptr) { FAIL(\"pstate_get_api(%d) is NULL: %s\", PSTATE_ABI_MAJOR, pstate_last_error()); return 1; }",
              "  if (api->struct_size != sizeof(pstate_api_t)) FAIL(\"the table's struct_size %zu != sizeof %zu\", api->struct_size, sizeof(pstate_api_t));",
              "  if (api->abi_major != PSTATE_ABI_MAJOR) FAIL(\"the table's abi_major is %u\", (unsigned)api->abi_major);",
              "  if (pstate_get_api(PSTATE_ABI_MAJOR - 1) != nullptr) FAIL(\"pstate_get_api(%d) is not NULL\", PSTATE_ABI_MAJOR - 1);"]
    for m in table_members:
        lines.append(f"  if (api->{m} != &pstate_{m}) FAIL(\"pstate_api_t member {m} is not pstate_{m} (src/api/api_table.cpp)\");")
    for s in checked_structs:
        if s != "pstate_api_t" and init_macro(s) in macros:
            lines.append(f"  {{ {s} v = {init_macro(s)}; if (v.struct_size != sizeof({s})) "
                         f"FAIL(\"{init_macro(s)} sets struct_size %zu, not sizeof({s}) %zu\", v.struct_size, sizeof({s})); }}")
    lines += ["  return bad != 0;", "}"]
    work.mkdir(parents=True, exist_ok=True)
    program, exe = work / "header_rules_check.cpp", work / "header_rules_check"
    program.write_text("\n".join(lines) + "\n")
    libdir = str(pathlib.Path(library).resolve().parent)
    build = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", *cxxflags, f"-I{src / 'include'}",
                            str(program), "-o", str(exe), library, f"-Wl,-rpath,{libdir}"],
                           capture_output=True, text=True)
    if build.returncode != 0:
        errors.append(f"{program} does not compile (a rule the compiler checks is broken):\n{build.stderr}")
    else:
        run = subprocess.run([str(exe)], capture_output=True, text=True)
        if run.returncode != 0:
            errors.append(f"{exe} failed:\n{run.stdout}{run.stderr}")

    for n in notes:
        print(f"header_rules: note: {n}")
    print(f"header_rules: {len(structs)} structs ({len(checked_structs)} with struct_size checked), "
          f"{len(functions)} PSTATE_API functions, {len(members)} table members, "
          f"{len(symbols)} exported pstate_* symbols (PSTATE_{major})")
    for e in errors:
        print(f"header_rules: FAIL: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
