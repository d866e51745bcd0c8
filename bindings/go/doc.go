// Package pstate is the Go binding of pstate, the parallel state of an LLM serving runtime
// (SGLang's distributed/parallel_state.py as a C library): rendezvous, SGLang's tensor-,
// pipeline-, attention- and MoE-parallel groups, and the collectives they carry.
//
//	func run() (err error) { // main: if err := run(); err != nil { log.Fatal(err) }
//		ps, err := pstate.Init() // RANK, WORLD_SIZE, MASTER_ADDR, ... from `pstate run -n N`
//		if err != nil {
//			return err
//		}
//		defer func() { // Close on success, Abort after an error (a peer may be gone)
//			if err != nil {
//				_ = ps.Abort()
//				return
//			}
//			err = ps.Close()
//		}()
//		if err := ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 2}); err != nil {
//			return err
//		}
//		tp, err := ps.Group(pstate.TP)
//		if err != nil {
//			return err
//		}
//		x := []float32{1, 2, 3}
//		return pstate.AllReduce(tp, x, pstate.Sum) // in place
//	}
//
// A deferred Close does not run when the function calls log.Fatal or os.Exit: do the work in a
// function that returns its error, as above (examples/tworanks), so the teardown always runs.
//
// Errors are *Error values carrying the status and the library's explanation; compare them
// with errors.Is against the Err* sentinels. Host buffers are Go slices of numeric types
// (Element); device buffers are addresses (DeviceBuffer).
//
// The raw layer (internal/capi) is SWIG's output for bindings/pstate.i, committed: building
// needs gcc and pkg-config (not SWIG); `pkg-config pstate` gives the header and -lpstate (an
// installed libpstate-dev, or PKG_CONFIG_PATH=<build>/pkgconfig for a build tree).
//
// Ctrl-C: ps.Interrupt(), from any goroutine (e.g. a signal.Notify loop), stops the call blocked
// on ps with ErrInterrupted; the PState is then failed: Abort it.
//
// Concurrency follows the C rules: a PState and its groups may be used from any goroutine, one
// call at a time (a mutex in PState serializes them); different PStates are independent.
package pstate
