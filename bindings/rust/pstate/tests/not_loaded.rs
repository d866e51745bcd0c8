//! libpstate that cannot be loaded (issue 31): every call answers `Status::NotLoaded` and the
//! message names the call once, what was tried and the fixes, never "PSTATE_UNKNOWN_STATUS".
//! Its own test binary (one process: pstate-sys loads the library once per process), with
//! `PSTATE_LIBRARY` naming a file that does not exist.
use pstate::{InitOptions, Layout, PState, ParallelConfig, Status};

#[test]
fn a_library_that_cannot_be_loaded_is_a_clear_error() {
    let missing = std::env::temp_dir().join(format!("pstate-rs-no-such-dir-{}/libpstate.so.1", std::process::id()));
    std::env::set_var("PSTATE_LIBRARY", &missing); // before the first call of this process
    let err = PState::init(&InitOptions { world_size: Some(1), rank: Some(0), ..Default::default() }).err().unwrap();
    assert_eq!(err.status, Status::NotLoaded, "{err}");
    let text = err.to_string();
    // before: "PSTATE_UNKNOWN_STATUS: pstate-sys: libpstate could not be loaded (...)"
    assert!(text.starts_with("libpstate not loaded: PState::init: libpstate.so.1 could not be loaded (tried "), "{text}");
    assert!(text.contains(&missing.display().to_string()) && text.contains("set PSTATE_LIBRARY to a libpstate.so.1 that exists"), "{text}");
    assert!(!text.contains("UNKNOWN") && !text.contains("pstate_") && !text.contains("pstate-sys"), "{text}");
    assert_eq!(text.matches("PState::init").count(), 1, "{text}");
    // another call names itself, and the status keeps its C name without the library
    let err = Layout::new(2, &ParallelConfig::default()).err().unwrap();
    assert_eq!(err.status, Status::NotLoaded, "{err}");
    assert!(err.detail.starts_with("Layout::new: libpstate.so.1 could not be loaded"), "{err}");
    assert_eq!(err.status.name(), "PSTATE_ERR_UNSUPPORTED");
    assert_eq!(pstate::library_version(), 0);
}
