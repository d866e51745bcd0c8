#!/usr/bin/env python3
"""cut_appended.py HEADER BASELINE.abi NEW.abi OUT.abi — NEW's ABI with the members appended to
struct_size structs cut off, for abi/check.sh.

pstate.h grows its structs only at their end, and only those that start with `size_t
struct_size` (the library reads and writes no further than the caller's struct_size). So such a
struct may change between the baseline and now in one way: members added after its old end. This
writes NEW's abidw description with every struct_size struct (listed from HEADER) that grew cut
back to the baseline's size — its members at offsets past the old end dropped, its size set to
the old one. abidiff of BASELINE against OUT must then find nothing in those structs: a member
reordered, retyped, removed or inserted before the old end is still there to see. (libabigail's
own suppression for this, `has_data_member_inserted_at = end`, also hides a reorder or a retype
of the same struct: tests/abi/variants.py's members_reordered passed it.)

Prints one line per struct it cut: NAME OLD_BITS NEW_BITS.
"""
import re
import sys
import xml.etree.ElementTree as ET


def struct_size_structs(header):
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", open(header).read(), flags=re.S)
    return set(re.findall(r"\bstruct\s+(\w+)\s*\{\s*size_t\s+struct_size\s*;", text))


def definitions(root, names):
    """name -> the class-decl elements that define it (not declaration-only)."""
    found = {}
    for decl in root.iter("class-decl"):
        name = decl.get("name")
        if name in names and decl.get("is-declaration-only") != "yes" and decl.get("size-in-bits"):
            found.setdefault(name, []).append(decl)
    return found


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    header, base_path, new_path, out_path = argv[1:]
    names = struct_size_structs(header)
    base = definitions(ET.parse(base_path).getroot(), names)
    tree = ET.parse(new_path)
    for name, decls in sorted(definitions(tree.getroot(), names).items()):
        if name not in base:
            continue  # a new struct: reached only through added functions
        old_bits = int(base[name][0].get("size-in-bits"))
        for decl in decls:
            new_bits = int(decl.get("size-in-bits"))
            if new_bits <= old_bits:
                continue  # unchanged, or shrunk: abidiff reports it
            for member in list(decl.findall("data-member")):
                if int(member.get("layout-offset-in-bits", "0")) >= old_bits:
                    decl.remove(member)
            decl.set("size-in-bits", str(old_bits))
            print(name, old_bits, new_bits)
    tree.write(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
