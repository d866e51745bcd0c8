package pstate_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// expectRefused checks a receiver's error for a value a sender could not encode.
func expectRefused(t *testing.T, what string, err error, rank int, text string) *pstate.RefusedError {
	t.Helper()
	var re *pstate.RefusedError
	if !errors.Is(err, pstate.ErrRefused) || !errors.Is(err, pstate.ErrInvalidArgument) || !errors.As(err, &re) {
		t.Fatalf("%s: err = %v, want ErrRefused", what, err)
	}
	if re.Rank != rank || !strings.Contains(re.Reason, text) || !strings.Contains(re.Reason, "Go binding: gob") {
		t.Fatalf("%s: refusal of rank %d (%q), want rank %d and %q", what, re.Rank, re.Reason, rank, text)
	}
	return re
}

// expectEncodeErr checks a sender's own error for a value gob cannot encode.
func expectEncodeErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, pstate.ErrInvalidArgument) || errors.Is(err, pstate.ErrRefused) || !strings.Contains(err.Error(), "gob") {
		t.Fatalf("%s: sender's err = %v, want gob's encoding error", what, err)
	}
}

func TestUnencodableValueIsRefusedOnEveryRankAndTheNextCallIsNotShiftedThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		me, n := w.RankInGroup(), w.WorldSize()

		// a channel from rank 0, then the next broadcast from rank 0 reaches everyone
		_, err := pstate.BroadcastValue(w, make(chan int), 0)
		if me == 0 {
			expectEncodeErr(t, "BroadcastValue(chan)", err)
		} else {
			expectRefused(t, "BroadcastValue(chan)", err, 0, "chan int")
		}
		next, err := pstate.BroadcastValue(w, stepConfig{Model: "after-chan"}, 0)
		must(t, err)
		if next.Model != "after-chan" {
			t.Fatalf("BroadcastValue after a refusal = %+v (shifted?)", next)
		}
		// a func from the last rank
		var f func()
		if me == n-1 {
			f = func() {}
		}
		_, err = pstate.BroadcastValue(w, f, n-1)
		if me == n-1 {
			expectEncodeErr(t, "BroadcastValue(func)", err)
		} else {
			expectRefused(t, "BroadcastValue(func)", err, n-1, "func()")
		}
		word, err := pstate.BroadcastValue(w, "last-"+map[bool]string{true: "src", false: "other"}[me == n-1], n-1)
		must(t, err)
		if word != "last-src" {
			t.Fatalf("BroadcastValue after a refusal = %q (shifted?)", word)
		}

		// SendValue / RecvValue
		switch me {
		case 0:
			expectEncodeErr(t, "SendValue(chan)", pstate.SendValue(w, make(chan int), 1))
			must(t, pstate.SendValue(w, stepConfig{Model: "sent"}, 1))
		case 1:
			_, err := pstate.RecvValue[chan int](w, 0)
			expectRefused(t, "RecvValue", err, 0, "chan int")
			got, err := pstate.RecvValue[stepConfig](w, 0)
			must(t, err)
			if got.Model != "sent" {
				t.Fatalf("RecvValue after a refusal = %+v", got)
			}
		}

		// AllGatherValue: every rank encodes; rank 1's refusal fails every rank
		vals := []any{"zero", make(chan int), "two"}
		_, err = pstate.AllGatherValue(w, vals[me])
		if me == 1 {
			expectEncodeErr(t, "AllGatherValue", err)
		} else {
			expectRefused(t, "AllGatherValue", err, 1, "")
		}
		// two refusing ranks: the others name both
		var v any = "fine"
		if me >= 1 {
			v = func() {}
		}
		_, err = pstate.AllGatherValue(w, v)
		if me >= 1 {
			expectEncodeErr(t, "AllGatherValue(two refusals)", err)
		} else {
			re := expectRefused(t, "AllGatherValue(two refusals)", err, 1, "")
			if len(re.Reasons) != n-1 || re.Reasons[2] == "" {
				t.Fatalf("refusals = %v, want ranks 1..%d", re.Reasons, n-1)
			}
		}
		all, err := pstate.AllGatherValue(w, me*10)
		must(t, err)
		check(t, "AllGatherValue after refusals", all, []int{0, 10, 20})
	})
}

func TestBytesThatAreNotAnObjectFrameAreACleanErrorThreeRanks(t *testing.T) {
	onRanks(t, 3, func(t *testing.T) {
		ps := mustInit(t)
		defer ps.Close()
		w := mustGroup(t, ps, pstate.World)
		me, n := w.RankInGroup(), w.WorldSize()
		payloads := []struct {
			raw  []byte
			text string
		}{
			{[]byte("garbage!"), "not a pstate object frame"},
			{nil, "not a pstate object frame"},
			{[]byte("PSOB"), "not a pstate object frame"},
			{[]byte("PSOB\x07g\x01"), "version 7"},
			{[]byte("PSOB\x01p\x80\x05K\x01."), "pickle (Python binding)"},
			{[]byte("PSOB\x01?"), "unknown kind"},
			{[]byte("PSOB\x01g\xff\xff\xff"), "gob"}, // a frame whose gob body is corrupt
		}
		for _, p := range payloads {
			if me == 0 {
				_, err := w.BroadcastObject(p.raw, 0) // the raw C-level call
				must(t, err)
				continue
			}
			_, err := pstate.BroadcastValue(w, stepConfig{}, 0)
			var pe *pstate.Error
			if !errors.Is(err, pstate.ErrInvalidArgument) || !errors.As(err, &pe) || !strings.Contains(pe.Detail, p.text) {
				t.Fatalf("payload %q: err = %v, want %q", p.raw, err, p.text)
			}
			if p.text != "gob" && !errors.Is(err, pstate.ErrNotAFrame) {
				t.Fatalf("payload %q: err = %v, want ErrNotAFrame", p.raw, err)
			}
		}
		got, err := pstate.BroadcastValue(w, stepConfig{Model: "good", Tokens: []int{1}}, 0)
		must(t, err)
		if !reflect.DeepEqual(got, stepConfig{Model: "good", Tokens: []int{1}}) {
			t.Fatalf("BroadcastValue after garbage = %+v", got)
		}
		switch me {
		case 0:
			must(t, w.SendObject([]byte("junk"), 1))
			must(t, pstate.SendValue(w, "fine", 1))
		case 1:
			_, err := pstate.RecvValue[string](w, 0)
			expectErr(t, err, pstate.ErrNotAFrame)
			s, err := pstate.RecvValue[string](w, 0)
			must(t, err)
			if s != "fine" {
				t.Fatalf("RecvValue after garbage = %q", s)
			}
		}
		if me == n-1 {
			_, err := w.AllGatherObject([]byte("junk"))
			must(t, err)
		} else {
			_, err := pstate.AllGatherValue(w, me)
			expectErr(t, err, pstate.ErrNotAFrame)
		}
		all, err := pstate.AllGatherValue(w, me)
		must(t, err)
		check(t, "AllGatherValue after garbage", all, []int{0, 1, 2})
	})
}
