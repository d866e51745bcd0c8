// Package capi is the raw layer of the Go binding: SWIG generates it from bindings/pstate.i
// (capi.swig is a link to it) whenever the go tool builds this package. Use package pstate.
//
// Linking: -lpstate from the default library path, or from CGO_LDFLAGS
// ("-L/path/to/lib -Wl,-rpath,/path/to/lib") for a build tree or a non-standard prefix.
package capi

// #cgo CFLAGS: -I${SRCDIR}/../../../../include
// #cgo LDFLAGS: -lpstate
import "C"

// The go tool learns a package's imports from its .go files only; the SWIG-generated file
// uses these too (strings.Clone copies C strings), so they are named here for `go vet`.
import (
	_ "strings"
	_ "sync"
	_ "unsafe"
)
