package pstate_test

import (
	"errors"
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// On 2 ranks: a Go hook (ps.AddHook) sees every call BEFORE and AFTER, in order, with its status
// (issue 45, hooks); its error in HookBefore refuses rank 1's AllReduce of 3 elements on both
// ranks and the group goes on; a removed hook sees nothing; Revoke gives one HookAbort.
func TestHooksSeeEveryCallInOrderRefuseAndAbortTwoRanks(t *testing.T) {
	onRanks(t, 2, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Abort()
		w := mustGroup(t, ps, pstate.World)
		r := w.RankInGroup()
		var seen []pstate.CallInfo
		id, err := ps.AddHook(func(info *pstate.CallInfo) error {
			seen = append(seen, *info)
			if info.Phase == pstate.HookBefore && r == 1 && info.Operation == "all_reduce" && info.Count == 3 {
				return errors.New("three is refused")
			}
			return nil
		})
		must(t, err)
		if _, err := ps.AddHook(nil); err == nil {
			t.Fatal("AddHook(nil) accepted")
		}
		x := []float32{1, 2, 3, 4}
		must(t, w.AllReduce(pstate.Slice(x), pstate.Slice(x), pstate.Sum))
		must(t, w.Barrier())
		if r == 0 {
			must(t, w.Send(pstate.Slice([]int64{1, 2}), 1))
		} else {
			must(t, w.Recv(pstate.Slice(make([]int64, 2)), 0))
		}
		three := []float32{1, 1, 1}
		err = w.AllReduce(pstate.Slice(three), pstate.Slice(three), pstate.Sum)
		expectErr(t, err, pstate.ErrInvalidArgument)
		if want := map[int]string{0: "rank 1", 1: "refused by hook"}[r]; !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal's text lacks %q: %v", want, err)
		}
		y := []float32{1, 1}
		must(t, w.AllReduce(pstate.Slice(y), pstate.Slice(y), pstate.Sum))
		check(t, "AllReduce after the refusal", y, []float32{2, 2})

		p2p := "send"
		if r == 1 {
			p2p = "recv"
		}
		want := []struct {
			op     string
			status pstate.Status
		}{{"all_reduce", pstate.StatusOK}, {"barrier", pstate.StatusOK}, {p2p, pstate.StatusOK},
			{"all_reduce", pstate.StatusInvalidArgument}, {"all_reduce", pstate.StatusOK}}
		if len(seen) != 2*len(want) {
			t.Fatalf("%d events for %d calls: %+v", len(seen), len(want), seen)
		}
		for k, c := range want {
			b, a := seen[2*k], seen[2*k+1]
			if b.Phase != pstate.HookBefore || a.Phase != pstate.HookAfter || b.Operation != c.op ||
				a.Operation != c.op || a.Status != c.status || b.CallID != a.CallID || b.Group != "world:0" {
				t.Fatalf("call %d: want %s %v, saw %+v then %+v", k, c.op, c.status, b, a)
			}
			if k > 0 && b.CallID <= seen[2*k-2].CallID {
				t.Fatalf("call %d: id %d after %d", k, b.CallID, seen[2*k-2].CallID)
			}
		}
		if seen[0].DType != pstate.Float32 || seen[0].Bytes != 16 || seen[0].Send == 0 || seen[4].Peer != 1-r {
			t.Fatalf("the descriptor: %+v / %+v", seen[0], seen[4])
		}
		must(t, ps.RemoveHook(id))
		expectErr(t, ps.RemoveHook(id), pstate.ErrInvalidArgument)
		n := len(seen)
		must(t, w.Barrier())
		if len(seen) != n {
			t.Fatalf("a removed hook saw %d more events", len(seen)-n)
		}
		_, err = ps.AddHook(func(info *pstate.CallInfo) error { seen = append(seen, *info); return nil })
		must(t, err)
		must(t, ps.Revoke())
		last := seen[len(seen)-1]
		if last.Phase != pstate.HookAbort || last.Operation != "pstate_revoke" || last.Status != pstate.StatusAborted {
			t.Fatalf("revoke: the last event %+v", last)
		}
		must(t, ps.Abort())
		aborts := 0
		for _, e := range seen {
			if e.Phase == pstate.HookAbort {
				aborts++
			}
		}
		if aborts != 1 {
			t.Fatalf("%d HookAbort events", aborts)
		}
	})
}
