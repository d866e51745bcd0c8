//! pstate-sys found libpstate's directory (DEP_PSTATE_LIB_DIR); give this crate's tests,
//! examples and binaries the same rpath so they run from a build tree without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_PSTATE_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_PSTATE_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
