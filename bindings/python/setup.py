"""setup.py — builds the pstate Python package: SWIG runs on ../pstate.i at build time, the
extension links libpstate.

    pip install bindings/python                     # offline: no build isolation needed
    PSTATE_LIB_DIR=build pip install bindings/python  # link a build tree (rpath recorded)

Environment: PSTATE_LIB_DIR (where libpstate.so is; else `pkg-config pstate`, else the default
library path), PSTATE_INCLUDE_DIR (where pstate/pstate.h is; default ../../include, else
pkg-config), SWIG (the swig executable; default swig4.0/swig on PATH).

Nothing is written into the source folder (a read-only checkout works): the build folders
(build/, *.egg-info) go to a fresh temporary folder, PSTATE_BUILD_TMP when set. The version is
the one pstate.h declares, as pstate.__version__ says.

There is deliberately no pyproject.toml [build-system]: pip would then build in an isolated
environment and try to download setuptools, which fails offline. pip uses the setuptools and
wheel of the interpreter instead (Debian: python3-setuptools, python3-wheel).
"""
import atexit
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
INTERFACE = HERE.parent / "pstate.i"


def header_version(include_dirs) -> str:
    """MAJOR.MINOR.PATCH of the pstate.h the module is built from (pstate.__version__)."""
    for d in include_dirs:
        header = Path(d) / "pstate" / "pstate.h"
        if header.exists():
            text = header.read_text()
            parts = [re.search(rf"#define PSTATE_VERSION_{p} (\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
            if all(parts):
                return ".".join(m.group(1) for m in parts)
    raise RuntimeError("pstate/pstate.h not found: set PSTATE_INCLUDE_DIR or install libpstate-dev")


def pkg_config(flag: str):
    try:
        out = subprocess.run(["pkg-config", flag, "pstate"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [f[2:] for f in out.split() if f[:2] in ("-I", "-L")]


def include_dirs():
    if os.environ.get("PSTATE_INCLUDE_DIR"):
        return [os.environ["PSTATE_INCLUDE_DIR"]]
    tree = HERE.parent.parent / "include"
    return [str(tree)] if (tree / "pstate" / "pstate.h").exists() else pkg_config("--cflags-only-I")


def library_dirs():
    if os.environ.get("PSTATE_LIB_DIR"):
        return [os.environ["PSTATE_LIB_DIR"]]
    return pkg_config("--libs-only-L")


class BuildWithSwig(build_ext):
    """Runs SWIG on pstate.i: the C wrapper goes to build_temp, capi.py next to the extension."""

    def build_extension(self, ext):
        swig = os.environ.get("SWIG") or shutil.which("swig4.0") or shutil.which("swig")
        if not swig:
            raise RuntimeError("SWIG >= 4 is needed to build pstate (Debian: apt-get install swig)")
        if not INTERFACE.exists():
            raise RuntimeError(f"{INTERFACE} not found: build from a pstate source tree")
        temp = Path(self.build_temp)
        temp.mkdir(parents=True, exist_ok=True)
        package_dir = Path(self.get_ext_fullpath(ext.name)).parent
        package_dir.mkdir(parents=True, exist_ok=True)
        wrapper = temp / "capi_wrap.c"
        cmd = [swig, "-python", "-outdir", str(package_dir), "-o", str(wrapper)]
        cmd += ["-I" + d for d in ext.include_dirs] + [str(INTERFACE)]
        self.announce(" ".join(cmd), level=2)
        subprocess.run(cmd, check=True)
        ext.sources = [str(wrapper)]
        super().build_extension(ext)


libs = library_dirs()
includes = include_dirs()
# Out of the source folder: pip builds local folders in place, which fails on a read-only checkout
# and leaves build/ and pstate.egg-info behind otherwise.
scratch = tempfile.mkdtemp(prefix="pstate-build-", dir=os.environ.get("PSTATE_BUILD_TMP") or None)
atexit.register(shutil.rmtree, scratch, True)  # pip has taken the wheel and metadata by then
setup(
    name="pstate",
    version=header_version(includes),
    description="Parallel state of an LLM serving runtime (SGLang's parallel_state.py): groups and collectives",
    long_description=(HERE.parent.parent / "docs" / "bindings.md").read_text()
    if (HERE.parent.parent / "docs" / "bindings.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=["pstate"],
    package_data={"pstate": ["py.typed"]},
    ext_modules=[Extension(
        "pstate._capi",
        sources=[str(INTERFACE)],  # replaced by the SWIG output in BuildWithSwig
        include_dirs=includes,
        library_dirs=libs,
        runtime_library_dirs=libs,
        libraries=["pstate"],
        extra_compile_args=["-fno-strict-aliasing"],
    )],
    cmdclass={"build_ext": BuildWithSwig},
    options={"build": {"build_base": os.path.join(scratch, "build")}, "egg_info": {"egg_base": scratch}},
    zip_safe=False,
)
