package pstate_test

import (
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// On 3 ranks: AllToAllV (pstate_all_to_all_v) with uneven counts, zeros among them, packed (the
// generic form) and with the parts in reverse order and gaps (the Buffer form); the reference is
// computed here from (sender, receiver, index). A pair whose counts disagree is ErrMismatch on
// every rank, and the next call works; a refusal of the binding's own (a count past the buffer)
// is ErrInvalidArgument on every rank.
func TestAllToAllVUnevenCountsPermutedDisplacementsAndMismatchThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Abort()
		w := mustGroup(t, ps, pstate.World)
		r, n := w.RankInGroup(), w.WorldSize()
		count := func(i, j int) int { return (i + 2*j) % 4 } // zeros at (0,0), (2,1), ...
		value := func(i, j, k int) int32 { return int32(1000*i + 100*j + k) }

		sc, rc := make([]int, n), make([]int, n)
		var send []int32
		for j := 0; j < n; j++ {
			sc[j], rc[j] = count(r, j), count(j, r)
			for k := 0; k < sc[j]; k++ {
				send = append(send, value(r, j, k))
			}
		}
		got, err := pstate.AllToAllV(w, send, sc, rc)
		must(t, err)
		var want []int32
		for i := 0; i < n; i++ {
			for k := 0; k < rc[i]; k++ {
				want = append(want, value(i, r, k))
			}
		}
		check(t, "AllToAllV packed", got, want)

		// Reverse order with a gap of 2 after every part, on both sides.
		place := func(counts []int) ([]int, int) {
			displs, at := make([]int, n), 0
			for j := n - 1; j >= 0; j-- {
				displs[j] = at
				at += counts[j] + 2
			}
			return displs, at
		}
		sd, sextent := place(sc)
		rd, rextent := place(rc)
		sbuf := make([]int32, sextent)
		for j := 0; j < n; j++ {
			for k := 0; k < sc[j]; k++ {
				sbuf[sd[j]+k] = value(r, j, k)
			}
		}
		rbuf := make([]int32, rextent)
		for k := range rbuf {
			rbuf[k] = -7
		}
		must(t, w.AllToAllV(pstate.Slice(sbuf), sc, sd, pstate.Slice(rbuf), rc, rd))
		wantBuf := make([]int32, rextent)
		for k := range wantBuf {
			wantBuf[k] = -7
		}
		for i := 0; i < n; i++ {
			for k := 0; k < rc[i]; k++ {
				wantBuf[rd[i]+k] = value(i, r, k)
			}
		}
		check(t, "AllToAllV reversed with gaps", rbuf, wantBuf)

		// Group rank 0 sends one element more to group rank 1 than rank 1 expects.
		bad := append([]int(nil), sc...)
		if r == 0 {
			bad[1]++
		}
		big := make([]int32, 64)
		_, err = pstate.AllToAllV(w, big[:sum(bad)], bad, rc)
		expectErr(t, err, pstate.ErrMismatch)
		if err == nil || !strings.Contains(err.Error(), "group rank 0 (rank 0) sends") {
			t.Fatalf("AllToAllV mismatch error: %v", err)
		}
		got, err = pstate.AllToAllV(w, send, sc, rc)
		must(t, err)
		check(t, "AllToAllV after the mismatch", got, want)

		// The binding's own refusal (rank 2's send is shorter than its counts) fails every rank.
		short := send
		if r == 2 {
			short = send[:len(send)-1]
		}
		_, err = pstate.AllToAllV(w, short, sc, rc)
		expectErr(t, err, pstate.ErrInvalidArgument)
		got, err = pstate.AllToAllV(w, send, sc, rc)
		must(t, err)
		check(t, "AllToAllV after the refusal", got, want)
	})
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
