# bindings/go/bindings_go_outside.cmake: a script run by bindings_go_outside_tree and
# consumer_go_installed (declared in bindings_go.cmake beside it), never included.
#
# bindings_go_outside — the Go module as a user outside this tree gets it (issue 18): a copy of
# bindings/go in a temporary folder, no SWIG on PATH, and a module of its own that requires
# pstate.dev/pstate through a `replace` to that copy; `go build` finds the header and library with
# `pkg-config pstate` (PKG_CONFIG_PATH = the build tree's pkgconfig folder) and the program runs a
# world of one without LD_LIBRARY_PATH. Script mode (-P); bindings_go.cmake declares it.
#   -DGO=... -DSOURCE=<repo> -DWORK=<scratch> -DPKG_CONFIG_DIR=<build>/pkgconfig
if(NOT CMAKE_SCRIPT_MODE_FILE)  # a script only: the declaration is in bindings_go.cmake
  return()
endif()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/app)
file(COPY ${SOURCE}/bindings/go/ DESTINATION ${WORK}/pstate-go)
file(WRITE ${WORK}/app/go.mod "module example.com/app\n\ngo 1.18\n\nrequire pstate.dev/pstate v0.0.0\n\nreplace pstate.dev/pstate => ../pstate-go\n")
file(WRITE ${WORK}/app/main.go [=[
package main

import (
	"fmt"
	"os"

	"pstate.dev/pstate"
)

func main() {
	ps, err := pstate.Init(pstate.WithWorldSize(1), pstate.WithRank(0), pstate.WithInitMethod("file://"+os.Args[1]))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	x := []float32{1, 2}
	w, _ := ps.World()
	if err := pstate.AllReduce(w, x, pstate.Sum); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("outside the tree: rank %d/%d all_reduce -> %v\n", ps.Rank(), ps.WorldSize(), x)
	_ = ps.Close()
}
]=])
get_filename_component(go_bin ${GO} DIRECTORY)
set(cache "")
if("$ENV{HOME}" STREQUAL "")  # the go tool needs a cache folder (env.cmake does the same)
  set(cache "GOCACHE=${WORK}-cache" "GOPATH=${WORK}-path")
elseif(GO_FRESH_CACHE)
  file(REMOVE_RECURSE ${WORK}-cache)
  set(cache "GOCACHE=${WORK}-cache")
endif()
# PATH without swig: the committed wrapper must be enough.
set(path "${go_bin}:/usr/bin:/bin")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=CGO_LDFLAGS --unset=CGO_CFLAGS --unset=LD_LIBRARY_PATH
                        "PATH=${path}" "PKG_CONFIG_PATH=${PKG_CONFIG_DIR}" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
                        CGO_ENABLED=1 ${cache} ${GO} build -o ${WORK}/app/app .
                WORKING_DIRECTORY ${WORK}/app RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "go build of a module that uses a copy of bindings/go failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${WORK}/app/app ${WORK}/store
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "outside the tree: rank 0/1 all_reduce -> \\[1 2\\]")
  message(FATAL_ERROR "the program built outside the tree failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
# The library it runs with is the one PKG_CONFIG_DIR describes (not a stale cached build's).
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ldd ${WORK}/app/app OUTPUT_VARIABLE deps)
set(ENV{PKG_CONFIG_PATH} ${PKG_CONFIG_DIR})
execute_process(COMMAND pkg-config --variable=libdir pstate OUTPUT_VARIABLE libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
get_filename_component(libdir "${libdir}" REALPATH)
if(NOT deps MATCHES "libpstate\\.so\\.[0-9]+ => ${libdir}/")
  message(FATAL_ERROR "the program does not load libpstate from ${libdir} (${PKG_CONFIG_DIR}):\n${deps}")
endif()
file(REMOVE_RECURSE ${WORK} ${WORK}-cache)
