package pstate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"pstate.dev/pstate/internal/capi"
)

// Status is pstate_status_t: the result of every C call (stable numbers).
type Status int

// The statuses of pstate.h.
const (
	StatusOK              Status = 0
	StatusInvalidArgument Status = 1
	StatusInvalidState    Status = 2
	StatusUnsupported     Status = 3
	StatusNoMemory        Status = 4
	StatusTimeout         Status = 5
	StatusPeerLost        Status = 6
	StatusTransport       Status = 7
	StatusMismatch        Status = 8
	StatusAuth            Status = 9
	StatusAborted         Status = 10
	StatusInternal        Status = 11
	StatusInterrupted     Status = 12 // PState.Interrupt stopped a wait
	StatusBusy            Status = 13 // another thread is inside a call on the same pstate_t: nothing done
)

// String is a short text of the status ("timeout", "peer lost", "busy"); CName is the C name.
func (s Status) String() string {
	if int(s) >= 0 && int(s) < len(statusTexts) {
		return statusTexts[s]
	}
	return fmt.Sprintf("unknown status %d", int(s))
}

// CName is the C name of the status ("PSTATE_ERR_TIMEOUT").
func (s Status) CName() string { return capi.Status_string(int(s)) }

var statusTexts = [...]string{"ok", "invalid argument", "invalid state", "unsupported", "out of memory", "timeout",
	"peer lost", "transport error", "mismatch", "authentication failed", "aborted", "internal error", "interrupted", "busy"}

// Error is a failed call: its status, the operation and the detail pstate_last_error() gave
// (what failed, where, what to do). Compare with the sentinels: errors.Is(err, pstate.ErrTimeout).
// Error() names the operation once, in Go names: "pstate: AllReduce on tp:0: peer lost: rank 1
// exited ...".
type Error struct {
	Status Status
	Op     string // the binding's operation, e.g. "AllReduce on tp:0"
	Detail string
	Cause  error // what the binding found, when it found the failure itself (ErrRefused, gob's error, ...); may be nil
}

// Unwrap returns Cause, so errors.Is(err, pstate.ErrRefused) and errors.As reach it.
func (e *Error) Unwrap() error { return e.Cause }

func (e *Error) Error() string {
	switch {
	case e.Op != "" && e.Detail != "":
		return fmt.Sprintf("pstate: %s: %s: %s", e.Op, e.Status, e.Detail)
	case e.Detail != "":
		return fmt.Sprintf("pstate: %s: %s", e.Status, e.Detail)
	case e.Op != "":
		return fmt.Sprintf("pstate: %s: %s", e.Op, e.Status)
	}
	return "pstate: " + e.Status.String()
}

// Is matches a sentinel of the same status (errors.Is(err, pstate.ErrPeerLost)).
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Op == "" && t.Detail == "" && t.Status == e.Status
}

// Timeout reports whether the error is a timeout (the net.Error convention).
func (e *Error) Timeout() bool { return e.Status == StatusTimeout }

// Sentinels for errors.Is, one per failure status.
var (
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrInvalidState    = &Error{Status: StatusInvalidState}
	ErrUnsupported     = &Error{Status: StatusUnsupported}
	ErrNoMemory        = &Error{Status: StatusNoMemory}
	ErrTimeout         = &Error{Status: StatusTimeout}
	ErrPeerLost        = &Error{Status: StatusPeerLost}
	ErrTransport       = &Error{Status: StatusTransport}
	ErrMismatch        = &Error{Status: StatusMismatch}
	ErrAuth            = &Error{Status: StatusAuth}
	ErrAborted         = &Error{Status: StatusAborted}
	ErrInternal        = &Error{Status: StatusInternal}
	ErrInterrupted     = &Error{Status: StatusInterrupted}
	ErrBusy            = &Error{Status: StatusBusy}
)

// wrap turns the raw layer's error (a *capi.StatusError with the C detail) into an *Error whose
// detail says the library's C names the Go way (goNames).
func wrap(err error, op string) error {
	if err == nil {
		return nil
	}
	var se *capi.StatusError
	if errors.As(err, &se) {
		return &Error{Status: Status(se.Status), Op: op, Detail: goNames(se.Message)}
	}
	return &Error{Status: StatusInternal, Op: op, Detail: err.Error()}
}

// The C names of pstate_last_error() texts as a Go user writes them (whole words only).
var goCalls = map[string]string{
	"pstate_init":                      "pstate.Init",
	"pstate_abort":                     "ps.Abort()",
	"pstate_revoke":                    "ps.Revoke()",
	"pstate_finalize":                  "ps.Close()",
	"pstate_shrink":                    "ps.Shrink()",
	"pstate_grow":                      "ps.Grow",
	"pstate_live_ranks":                "ps.LiveRanks()",
	"pstate_initialize_model_parallel": "ps.InitializeModelParallel",
	"pstate_destroy_model_parallel":    "ps.DestroyModelParallel",
	"pstate_get_group":                 "ps.Group",
	"pstate_graph_capture_begin":       "ps.GraphCapture",
	"pstate_graph_capture_end":         "Capture.End",
	"pstate_tp_allreduce":              "ps.TPAllReduce",
	"pstate_tp_allgather":              "ps.TPAllGather",
	"pstate_set_interrupt_check":       "ps.Interrupt",
	"pstate_trace_dump":                "ps.TraceDump",
	"pstate_mem_alloc":                 "g.MemAlloc",
	"pstate_mem_free":                  "DeviceMemory.Close",
	"pstate_mem_pool_reserve":          "g.MemPoolReserve",
	"pstate_mem_register":              "g.MemRegister",
	"pstate_mem_deregister":            "g.MemDeregister",
	"pstate_mem_query":                 "g.MemQuery",
	"pstate_group_mem_stats":           "g.MemStats",
	"pstate_set_graph_registration":    "ps.SetGraphRegistration",
	"pstate_group_set_timeout":         "g.SetTimeout",
	"pstate_group_timeout":             "g.Timeout",
	"pstate_t":                         "*pstate.PState",
	"pstate_group_t":                   "*pstate.Group",
	"pstate_dtype_t":                   "pstate.DType",
	"pstate_reduce_op_t":               "pstate.ReduceOp",
	"pstate_group_kind_t":              "pstate.GroupKind",
	"pstate_device_t":                  "pstate.Device",
	"pstate_parallel_config_t":         "pstate.ParallelConfig",
	"pstate_tensor_t":                  "pstate.Tensor",
	"PSTATE_DEVICE_CPU":                "WithDevice(pstate.CPU)",
	"PSTATE_DEVICE_CUDA":               "WithDevice(pstate.CUDA)",
	"PSTATE_GROUP_WORLD":               "pstate.World",
	"PSTATE_GROUP_TP":                  "pstate.TP",
	"PSTATE_GROUP_PP":                  "pstate.PP",
	"PSTATE_GROUP_ATTN_TP":             "pstate.AttnTP",
	"PSTATE_GROUP_ATTN_CP":             "pstate.AttnCP",
	"PSTATE_GROUP_MOE_EP":              "pstate.MoEEP",
	"PSTATE_GROUP_MOE_TP":              "pstate.MoETP",
	"PSTATE_GROUP_MOE_DP":              "pstate.MoEDP",
	"PSTATE_GROUP_DCP":                 "pstate.DCP",
	"PSTATE_GROUP_SHARED_EXPERTS_TP":   "pstate.SharedExpertsTP",
	"PSTATE_GROUP_SELF_PP":             "pstate.SelfPP",
	"PSTATE_GROUP_DP":                  "pstate.DP",
	"PSTATE_GROUP_PCP":                 "pstate.PCP",
	"PSTATE_GROUP_EP":                  "pstate.EP",
	"PSTATE_GROUP_EPLB":                "pstate.EPLB",
	"PSTATE_ENGINE_SGLANG":             "pstate.SGLang",
	"PSTATE_ENGINE_VLLM":               "pstate.VLLM",
	"pstate_engine_t":                  "pstate.Engine",
	"PSTATE_GROUP_CUSTOM":              "pstate.Custom",
	"PSTATE_BFLOAT16":                  "pstate.BFloat16",
	"PSTATE_FP8_E4M3":                  "pstate.FP8E4M3",
	"PSTATE_FP8_E5M2":                  "pstate.FP8E5M2",
	"PSTATE_SUM":                       "pstate.Sum",
	"PSTATE_PROD":                      "pstate.Prod",
	"PSTATE_MAX":                       "pstate.Max",
	"PSTATE_MIN":                       "pstate.Min",
	"PSTATE_AVG":                       "pstate.Avg",
}

// The Init options of pstate_init_params_t's fields.
var goOptions = map[string]string{
	"world_size": "WithWorldSize", "rank": "WithRank", "local_rank": "WithLocalRank", "init_method": "WithInitMethod",
	"device": "WithDevice", "device_ordinal": "WithDeviceOrdinal", "timeout_ms": "WithTimeout",
	"job_token": "WithJobToken", "socket_ifname": "WithSocketIfname",
}

var (
	cName       = regexp.MustCompile(`\b(?:pstate_init_params_t\.|params->)(\w+)|\b(pstate_[a-z0-9_]+|PSTATE_[A-Z0-9_]+)\b`)
	cDType      = regexp.MustCompile(`^PSTATE_(U?INT(8|32|64)|FLOAT(16|32|64))$`)
	cStatus     = regexp.MustCompile(`^PSTATE_ERR_([A-Z_]+)$`)
	cCallPrefix = regexp.MustCompile(`^(pstate_[a-z0-9_]+): `)
	// "<group> <op>: " or "<op>: " after the C call's name, which Error.Op says already
	cOpHead    = regexp.MustCompile(`^(?:\S+ )?([a-z0-9_]+): `)
	cDeviceArg = regexp.MustCompile(`device = PSTATE_DEVICE_(CPU|CUDA)`)
	// A dict another rank's binding refused arrives as the library's refusal of the stand-in dict
	// that binding sent (one tensor of dtype -1 named with the reason): keep only the reason.
	bindingRefusal = regexp.MustCompile(`(?s)(?:\S+ \w+: )?tensor 0 \('.*?refused by the sender's (\w+) binding: (.*)'\): dtype -1 is not a pstate_dtype_t`)
)

// goNames is a pstate_last_error() text with its C names said the Go way ("call pstate_abort"
// -> "call ps.Abort()", "set pstate_init_params_t.world_size" -> "set WithWorldSize",
// "PSTATE_GROUP_CUSTOM" -> "pstate.Custom"), without the C function's name in front nor the
// library's own "<group> <op>: " after it (Error.Op names the call), and a dict another rank's
// binding refused reduced to that binding's reason.
func goNames(detail string) string {
	detail = bindingRefusal.ReplaceAllString(detail, "$2 (its $1 binding refused it)")
	if m := cCallPrefix.FindStringSubmatch(detail); m != nil {
		detail = detail[len(m[0]):]
		for strings.HasPrefix(detail, m[0]) { // "pstate_new_group: pstate_new_group: ..."
			detail = detail[len(m[0]):]
		}
		if h := cOpHead.FindStringSubmatch(detail); h != nil && h[1] == strings.TrimPrefix(m[1], "pstate_") {
			detail = detail[len(h[0]):] // "tp:0 all_reduce: ..."
		}
	}
	detail = strings.ReplaceAll(detail, "call pstate_graph_capture_end first", "call Capture.End first")
	detail = cDeviceArg.ReplaceAllString(detail, "WithDevice(pstate.$1)")
	return cName.ReplaceAllStringFunc(detail, func(m string) string {
		sub := cName.FindStringSubmatch(m)
		if sub[1] != "" {
			if opt, ok := goOptions[sub[1]]; ok {
				return opt
			}
			return sub[1]
		}
		if name, ok := goCalls[sub[2]]; ok {
			return name
		}
		if strings.HasPrefix(sub[2], "pstate_") {
			return camel(strings.TrimPrefix(sub[2], "pstate_"))
		}
		if cDType.MatchString(sub[2]) {
			return "pstate." + camel(strings.ToLower(strings.TrimPrefix(sub[2], "PSTATE_")))
		}
		if st := cStatus.FindStringSubmatch(sub[2]); st != nil && knownStatus(sub[2]) {
			return "pstate.Err" + camel(strings.ToLower(st[1]))
		}
		return sub[2] // an environment variable (PSTATE_TRACE_DIR, ...) stays
	})
}

// knownStatus reports whether c is the C name of a status this binding has a sentinel for.
func knownStatus(c string) bool {
	for st := StatusInvalidArgument; st <= StatusBusy; st++ {
		if st.CName() == c {
			return true
		}
	}
	return false
}

// camel is all_reduce -> AllReduce.
func camel(snake string) string {
	parts := strings.Split(snake, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// detailOf is an error's text without the "pstate: <op>: <status>: " an *Error puts in front.
func detailOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) && pe.Detail != "" {
		return pe.Detail
	}
	return err.Error()
}

// invalid is an INVALID_ARGUMENT the binding finds before calling C.
func invalid(op, format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Detail: fmt.Sprintf(format, args...)}
}

// badState is an INVALID_STATE the binding finds before calling C.
func badState(op, format string, args ...any) error {
	return &Error{Status: StatusInvalidState, Op: op, Detail: fmt.Sprintf(format, args...)}
}
