package pstate_test

// What a user reads when a call is refused (issue 31): the operation named once, in Go names
// (not "PSTATE_GROUP_CUSTOM", not "tp:0 all_reduce" after "AllReduce on tp:0"), the status as
// text, and, for the buffers only the root of a rooted call uses, what is missing instead of a
// dtype comparison with the zero Buffer.

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"pstate.dev/pstate"
)

// namedOnce checks err's text: "pstate: <op>: <status>: <detail>" with op once, has in detail.
func namedOnce(t *testing.T, err error, want error, op, status, has string) {
	t.Helper()
	expectDetail(t, err, want, has)
	text := err.Error()
	if !strings.HasPrefix(text, "pstate: "+op+": "+status+": ") || strings.Count(text, op) != 1 {
		t.Fatalf("%q: want %q named once, then %q", text, op, status)
	}
	if strings.Contains(text, "PSTATE_") || strings.Contains(text, "pstate_") {
		t.Fatalf("%q speaks C", text)
	}
}

// Before: "send is float32 but recv is int8" (the zero Buffer's dtype).
func TestRootedCallsNameTheMissingRootBuffer(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	w := mustGroup(t, ps, pstate.World)
	x := []float32{1, 2}
	namedOnce(t, w.Gather(pstate.Slice(x), pstate.Buffer{}, 0), pstate.ErrInvalidArgument, "Gather on world:0", "invalid argument",
		"recv is Buffer{} on dst (group rank 0), which needs 2 float32 elements there: pass pstate.Slice of them (Buffer{} is for the other ranks)")
	namedOnce(t, w.Reduce(pstate.Slice(x), pstate.Buffer{}, pstate.Sum, 0), pstate.ErrInvalidArgument, "Reduce on world:0", "invalid argument",
		"recv is Buffer{} on the root (group rank 0), which needs 2 float32 elements there")
	namedOnce(t, w.Scatter(pstate.Buffer{}, pstate.Slice(x), 0), pstate.ErrInvalidArgument, "Scatter on world:0", "invalid argument",
		"send is Buffer{} on the root (group rank 0), which needs 2 float32 elements there")
	// a real buffer of another dtype is still a dtype error
	namedOnce(t, w.Gather(pstate.Slice(x), pstate.Slice([]int32{0, 0}), 0), pstate.ErrInvalidArgument, "Gather on world:0", "invalid argument",
		"send is float32 but recv is int32")
	// nothing to gather: any empty recv will do
	must(t, w.Gather(pstate.Slice([]float32{}), pstate.Buffer{}, 0))
}

// Before: "GroupKind(11) is not a pstate.GroupKind" (and GroupKind(1000) once Custom moved).
func TestGroupOfCustomSaysHowCustomGroupsAreReached(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	_, err := ps.Group(pstate.Custom)
	namedOnce(t, err, pstate.ErrInvalidArgument, "Group(custom)", "invalid argument",
		"pstate.Custom is not a kind of the layout: a custom group is the *Group that ps.NewGroup returned (keep it; its name is custom:<n>)")
	l, err := pstate.NewLayout(2, pstate.ParallelConfig{})
	must(t, err)
	defer l.Close()
	_, err = l.Groups(pstate.Custom)
	expectDetail(t, err, pstate.ErrInvalidArgument, "pstate.Custom is not a kind of the layout")
	kinds := []pstate.GroupKind{pstate.World, pstate.TP, pstate.PP, pstate.AttnTP, pstate.AttnCP, pstate.MoEEP, pstate.MoETP,
		pstate.MoEDP, pstate.DCP, pstate.SharedExpertsTP, pstate.SelfPP, pstate.Custom}
	want := "world tp pp attn_tp attn_cp moe_ep moe_tp moe_dp dcp shared_experts_tp self_pp custom"
	if got := strings.TrimSpace(fmt.Sprintln(kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5], kinds[6], kinds[7],
		kinds[8], kinds[9], kinds[10], kinds[11])); got != want {
		t.Fatalf("GroupKind strings: %q, want %q", got, want)
	}
	g, err := ps.NewGroup([]int{0})
	must(t, err)
	if g.Kind() != pstate.Custom || g.Kind().String() != "custom" || !strings.HasPrefix(g.Name(), "custom:") {
		t.Fatalf("NewGroup's group: kind %v, name %q", g.Kind(), g.Name())
	}
}

// Before: "pstate: NewGroup: PSTATE_ERR_INVALID_ARGUMENT: ...", the library's C names, and a
// group's own "<group> <op>: " after the binding's "<Op> on <group>".
func TestMessagesNameTheCallOnceInGoNames(t *testing.T) {
	ps := oneRank(t)
	defer ps.Close()
	_, err := ps.NewGroup([]int{0, 0})
	namedOnce(t, err, pstate.ErrInvalidArgument, "NewGroup", "invalid argument", "rank 0 passed 2 ranks")
	_, err = ps.Group(pstate.TP)
	namedOnce(t, err, pstate.ErrInvalidState, "Group(tp)", "invalid state", "call ps.InitializeModelParallel first")
	w := mustGroup(t, ps, pstate.World)
	namedOnce(t, w.Broadcast(pstate.Slice([]float32{1}), 5), pstate.ErrInvalidArgument, "Broadcast on world:0", "invalid argument",
		"root 5 is not a rank of group world:0")
	namedOnce(t, w.AllGather(pstate.Slice([]float32{1, 2}), pstate.Slice([]float32{0})), pstate.ErrInvalidArgument,
		"AllGather on world:0", "invalid argument", "recv holds 1 elements, the operation needs 2")
	if got := fmt.Sprint(pstate.StatusBusy, " ", pstate.StatusPeerLost, " ", pstate.Status(99)); got != "busy peer lost unknown status 99" {
		t.Fatalf("Status strings: %q", got)
	}
	if pstate.StatusTimeout.CName() != "PSTATE_ERR_TIMEOUT" || !errors.Is(err, pstate.ErrInvalidState) {
		t.Fatalf("CName %q", pstate.StatusTimeout.CName())
	}
}
