// Package capi is the raw layer of the Go binding: capi.go and capi_wrap.c are SWIG's output for
// bindings/pstate.i, made by regenerate.sh and committed, so the module builds from a copy or a
// `replace` path with no SWIG (the drift test bindings_go_drift keeps them in step with
// pstate.i and pstate.h). Use package pstate.
//
// Header and library come from `pkg-config pstate`: an installed libpstate-dev (/usr, or
// /usr/local after `./build.sh install /usr/local`), or a build tree with
// PKG_CONFIG_PATH=<build>/pkgconfig (its pstate.pc adds an rpath to the build tree).
package capi

// #cgo pkg-config: pstate
import "C"
