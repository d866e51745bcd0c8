package pstate

// goNames on texts of the library's shapes (unit test: the multi-rank failures that produce
// some of them are tested in multirank_test.go).

import "testing"

func TestGoNamesNameTheCallOnceAndNoCConstants(t *testing.T) {
	for _, c := range []struct{ c, goText string }{
		// before: "tp:0 all_reduce: rank 1 exited ..." after the binding's "AllReduce on tp:0"
		{"pstate_all_reduce: tp:0 all_reduce: rank 1 exited; call pstate_shrink or pstate_abort",
			"rank 1 exited; call ps.Shrink() or ps.Abort()"},
		// before: "NewGroup: ..." after the binding's "NewGroup"
		{"pstate_new_group: pstate_new_group: ranks disagree", "ranks disagree"},
		{"pstate_barrier: barrier: peer gone", "peer gone"},
		// another call's name in the head is information, not a repetition
		{"pstate_recv_tensor_dict: pp:0 send_tensor_dict: refused", "pp:0 send_tensor_dict: refused"},
		// before: C constants as they are
		{"pstate_recv_tensor_dict_sliced: pass a group of the same context (e.g. its PSTATE_GROUP_ATTN_TP), not PSTATE_GROUP_CUSTOM",
			"pass a group of the same context (e.g. its pstate.AttnTP), not pstate.Custom"},
		{"PSTATE_BFLOAT16 PSTATE_FLOAT32 PSTATE_UINT8 PSTATE_MAX PSTATE_ERR_BUSY PSTATE_TRACE_DIR PSTATE_ERR_NOPE",
			"pstate.BFloat16 pstate.Float32 pstate.Uint8 pstate.Max pstate.ErrBusy PSTATE_TRACE_DIR PSTATE_ERR_NOPE"},
	} {
		if got := goNames(c.c); got != c.goText {
			t.Errorf("goNames(%q)\n  = %q\nwant %q", c.c, got, c.goText)
		}
	}
}
