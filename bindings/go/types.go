package pstate

import (
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

// String is the library's name ("float32").
func (d DType) String() string { return capi.Dtype_name(int(d)) }

// Size is the bytes per element (0 for an unknown dtype).
func (d DType) Size() int { return int(capi.Dtype_size(int(d))) }

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

func (o ReduceOp) String() string { return capi.Reduce_op_name(int(o)) }

// Device is pstate_device_t: where the device communicator's tensors live.
type Device int

// The devices of pstate.h.
const (
	CPU  Device = 0
	CUDA Device = 1
)

// GroupKind is pstate_group_kind_t: the groups of SGLang's parallel_state.py.
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
)

func (k GroupKind) String() string { return capi.Group_kind_name(int(k)) }

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
