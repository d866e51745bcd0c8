//! The Rust spellings of the C initializer macros agree with the library: a default init-params
//! struct is accepted by pstate_layout_create's sibling checks, and the struct sizes equal the
//! header's (the bindgen layout tests check every offset).
use pstate_sys::*;

#[test]
fn parallel_config_init_is_accepted_by_layout_create() {
    let mut cfg = pstate_parallel_config_init();
    cfg.tensor_parallel_size = 2;
    cfg.pipeline_parallel_size = 2;
    let mut layout: *mut pstate_layout_t = std::ptr::null_mut();
    let st = unsafe { pstate_layout_create(4, &cfg, &mut layout) };
    assert_eq!(st, pstate_status_t::PSTATE_OK);
    let mut count = 0usize;
    let st = unsafe { pstate_layout_group_count(layout, pstate_group_kind_t::PSTATE_GROUP_PP, &mut count) };
    assert_eq!(st, pstate_status_t::PSTATE_OK);
    assert_eq!(count, 2);
    unsafe { pstate_layout_destroy(layout) };
}

#[test]
fn version_matches_the_header() {
    assert_eq!(unsafe { pstate_version() }, PSTATE_VERSION);
}
