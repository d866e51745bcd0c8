//! Finds libpstate for the linker: $PSTATE_LIB_DIR (a build tree or a private prefix), else
//! `pkg-config --libs-only-L pstate`, else the default library path. The directory found is
//! passed on to dependent crates as DEP_PSTATE_LIB_DIR (they add an rpath for their own tests and
//! binaries) and used as this crate's rpath.
use std::env;
use std::path::Path;
use std::process::Command;

fn pkg_config_dir() -> Option<String> {
    let out = Command::new("pkg-config").args(["--libs-only-L", "pstate"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().find_map(|f| f.strip_prefix("-L").map(str::to_owned))
}

fn main() {
    println!("cargo:rerun-if-env-changed=PSTATE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = env::var("PSTATE_LIB_DIR").ok().filter(|d| !d.is_empty()).or_else(pkg_config_dir);
    if let Some(dir) = dir {
        if !Path::new(&dir).join("libpstate.so").exists() && !Path::new(&dir).join("libpstate.so.0").exists() {
            println!("cargo:warning=PSTATE_LIB_DIR={dir} has no libpstate.so");
        }
        println!("cargo:rustc-link-search=native={dir}");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo:lib_dir={dir}");
    }
    println!("cargo:rustc-link-lib=dylib=pstate");
}
