package pstate

import (
	"fmt"
	"reflect"
	"unsafe"

	"pstate.dev/pstate/internal/capi"
)

// DType is pstate_dtype_t (values equal NCCL's ncclDataType_t).
type DType int

// The element types of pstate.h.
const (
	Int8     DType = 0
	Uint8    DType = 1
	Int32    DType = 2
	Uint32   DType = 3
	Int64    DType = 4
	Uint64   DType = 5
	Float16  DType = 6
	Float32  DType = 7
	Float64  DType = 8
	BFloat16 DType = 9
	FP8E4M3  DType = 10 // move-only on CPU: reductions return ErrUnsupported
	FP8E5M2  DType = 11 // move-only on CPU: reductions return ErrUnsupported
)

// String is the library's name ("float32"); "DType(42)" for a value outside the enumeration.
func (d DType) String() string { return named(capi.Dtype_name(int(d)), "DType", int(d)) }

// Size is the bytes per element (0 for an unknown dtype).
func (d DType) Size() int { return int(capi.Dtype_size(int(d))) }

// Valid reports whether d is one of the constants above.
func (d DType) Valid() bool { return d >= Int8 && d <= FP8E5M2 }

// ReduceOp is pstate_reduce_op_t. Avg is Sum divided by the group size (truncating for integers).
type ReduceOp int

// The reduction operators of pstate.h.
const (
	Sum  ReduceOp = 0
	Prod ReduceOp = 1
	Max  ReduceOp = 2
	Min  ReduceOp = 3
	Avg  ReduceOp = 4
)

// String is the library's name ("sum"); "ReduceOp(7)" for a value outside the enumeration.
func (o ReduceOp) String() string { return named(capi.Reduce_op_name(int(o)), "ReduceOp", int(o)) }

// Valid reports whether o is one of the constants above.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= Avg }

// Device is pstate_device_t: where the device communicator's tensors live.
type Device int

// The devices of pstate.h.
const (
	CPU  Device = 0
	CUDA Device = 1
)

// String is "cpu" or "cuda"; "Device(5)" for a value outside the enumeration.
func (d Device) String() string {
	switch d {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda"
	}
	return named("", "Device", int(d))
}

// Valid reports whether d is CPU or CUDA.
func (d Device) Valid() bool { return d == CPU || d == CUDA }

// Engine is pstate_engine_t: whose rank layout a ParallelConfig describes.
type Engine int

// The engines of pstate.h.
const (
	SGLang Engine = 0 // SGLang's initialize_model_parallel (the zero value): world = TP x PP
	VLLM   Engine = 1 // vLLM's: world = ExternalDP x DP x PP x PCP x TP
)

// String is "sglang" or "vllm" (`pstate layout --engine`); "Engine(7)" for a value that is neither.
func (e Engine) String() string {
	switch e {
	case SGLang:
		return "sglang"
	case VLLM:
		return "vllm"
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

// Valid reports whether e is an engine of pstate.h.
func (e Engine) Valid() bool { return e == SGLang || e == VLLM }

// GroupKind is pstate_group_kind_t: the groups of SGLang's (and vLLM's) parallel_state.py.
type GroupKind int

// The group kinds of pstate.h.
const (
	World           GroupKind = 0
	TP              GroupKind = 1
	PP              GroupKind = 2
	AttnTP          GroupKind = 3
	AttnCP          GroupKind = 4
	MoEEP           GroupKind = 5
	MoETP           GroupKind = 6
	MoEDP           GroupKind = 7
	DCP             GroupKind = 8
	SharedExpertsTP GroupKind = 9
	SelfPP          GroupKind = 10
	DP              GroupKind = 11 // vLLM's layout: data parallel
	PCP             GroupKind = 12 // vLLM: prefill context parallel
	EP              GroupKind = 13 // vLLM: expert parallel over DP x PCP x TP of one stage (MoE models)
	EPLB            GroupKind = 14 // vLLM: EP's ranks on a group of their own (MoE models)
	// Custom is the kind of a group made by PState.NewGroup ("custom:<n>"); PState.Group
	// refuses it (such groups are not in the layout).
	Custom GroupKind = 1000 // kinds from 1000 on are not layout kinds (pstate.h)
)

// String is the library's name of every kind ("tp", "shared_experts_tp", "custom");
// "GroupKind(99)" for a value that is none.
func (k GroupKind) String() string { return named(capi.Group_kind_name(int(k)), "GroupKind", int(k)) }

// Valid reports whether k is a kind of the layout (World ... EPLB: the kinds PState.Group and
// Layout take); Custom, the kind of NewGroup's groups, is not one.
func (k GroupKind) Valid() bool { return k >= World && k <= EPLB }

// named is the library's name of an enumeration value, or "Type(n)" when it has none (a typed
// constant out of range: the C library would refuse it).
func named(name, typ string, v int) string {
	if name != "" {
		return name
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// The Go names of each enumeration's constants, for the errors that refuse other values.
const (
	dtypeNames     = "Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, BFloat16, FP8E4M3, FP8E5M2"
	reduceOpNames  = "Sum, Prod, Max, Min, Avg"
	deviceNames    = "CPU, CUDA"
	groupKindNames = "World, TP, PP, AttnTP, AttnCP, MoEEP, MoETP, MoEDP, DCP, SharedExpertsTP, SelfPP, DP, PCP, EP, EPLB"
)

// checkOp refuses a ReduceOp outside the enumeration before C sees it.
func checkOp(op string, o ReduceOp) error {
	if !o.Valid() {
		return invalid(op, "ReduceOp(%d) is not a pstate.ReduceOp (%s)", int(o), reduceOpNames)
	}
	return nil
}

// checkKind refuses a GroupKind that is not a kind of the layout before C sees it.
func checkKind(op string, k GroupKind) error {
	if k == Custom {
		return invalid(op, "pstate.Custom is not a kind of the layout: a custom group is the *Group that "+
			"ps.NewGroup returned (keep it; its name is custom:<n>); the layout's kinds are %s", groupKindNames)
	}
	if !k.Valid() {
		return invalid(op, "GroupKind(%d) is not a pstate.GroupKind (%s)", int(k), groupKindNames)
	}
	return nil
}

// Half is an IEEE float16 element, BHalf a bfloat16 element (bit patterns; Go has no such types).
type (
	Half  uint16
	BHalf uint16
)

// Element is every Go type a slice buffer may hold. Named types whose underlying type is listed
// (type Logit float32) work too; int and uint are 64-bit here.
type Element interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~int | ~uint | ~float32 | ~float64 | Half | BHalf
}

// DTypeOf is the pstate dtype of a slice element type.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case Half:
		return Float16
	case BHalf:
		return BFloat16
	}
	switch reflect.TypeOf(zero).Kind() {
	case reflect.Int8:
		return Int8
	case reflect.Uint8:
		return Uint8
	case reflect.Int32:
		return Int32
	case reflect.Uint32:
		return Uint32
	case reflect.Int64:
		return Int64
	case reflect.Uint64:
		return Uint64
	case reflect.Int, reflect.Uint:
		if unsafe.Sizeof(zero) == 8 {
			if reflect.TypeOf(zero).Kind() == reflect.Int {
				return Int64
			}
			return Uint64
		}
		if reflect.TypeOf(zero).Kind() == reflect.Int {
			return Int32
		}
		return Uint32
	case reflect.Float32:
		return Float32
	}
	return Float64
}
