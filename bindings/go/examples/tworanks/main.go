// Command tworanks is the Go binding in one screen: run it with
//
//	pstate run -n 2 -- ./tworanks
//
// Each rank joins the job (RANK, WORLD_SIZE, MASTER_ADDR/PORT come from `pstate run`), makes a
// tensor-parallel group of both ranks, sums a slice across it and receives a config from rank 0.
// The work is in run, so that its deferred teardown runs before main exits (log.Fatal and
// os.Exit skip deferred calls): Close on success, Abort after any error (a peer may be gone or
// elsewhere, and Close would wait for it).
package main

import (
	"errors"
	"fmt"
	"log"

	"pstate.dev/pstate"
)

type config struct {
	Model     string
	MaxTokens int
}

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() (err error) {
	ps, err := pstate.Init()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = ps.Abort()
			return
		}
		err = ps.Close()
	}()
	if err := ps.InitializeModelParallel(pstate.ParallelConfig{TensorParallel: 2}); err != nil {
		return err
	}
	tp, err := ps.Group(pstate.TP)
	if err != nil {
		return err
	}
	x := []float32{1, 1, 1, 1}
	for i := range x {
		x[i] = float32(ps.Rank() + 1)
	}
	if err := pstate.AllReduce(tp, x, pstate.Sum); err != nil {
		if errors.Is(err, pstate.ErrPeerLost) || errors.Is(err, pstate.ErrTimeout) {
			return fmt.Errorf("a peer is gone, aborting: %w", err)
		}
		return err
	}
	cfg, err := pstate.BroadcastValue(tp, config{Model: "llama", MaxTokens: 128}, 0)
	if err != nil {
		return err
	}
	ranks, _ := tp.Ranks()
	fmt.Printf("rank %d/%d tp %s ranks %v: all_reduce -> %v, config %+v\n", ps.Rank(), ps.WorldSize(), tp.Name(), ranks, x, cfg)
	if x[0] != 3 || cfg.MaxTokens != 128 {
		return errors.New("unexpected result")
	}
	return nil
}
