package pstate

// Tensor dicts: SGLang's broadcast_tensor_dict / send_tensor_dict / recv_tensor_dict over Go
// values. A dict is a []Tensor, ordered as the C API is (a Go map has no order). Sending copies
// each tensor into C memory once (cgo rule: C may not read Go pointers out of Go memory, and Go
// 1.19 cannot pin); receiving gets each tensor's memory from the C allocation callback of
// pstate.i (malloc while the call runs) and copies it into a Go []byte after the call, then
// frees the C memory. Host (CPU) tensors only: the binding has no CUDA allocator.

import (
	"fmt"
	"strings"
	"unsafe"

	"pstate.dev/pstate/internal/capi"
)

// Tensor is one named tensor of a dict, in host memory: Data holds the elements row-major,
// exactly product(Shape) * DType.Size() bytes. An empty Shape is a scalar (one element); an
// extent of 0 makes an empty tensor. Any dtype travels, bfloat16 and fp8 included (Data is
// bytes); NewTensor and TensorValues convert from and to typed slices.
type Tensor struct {
	Name  string
	DType DType
	Shape []int64
	Data  []byte
}

// NumElements is the product of the extents (1 for a scalar).
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// NewTensor is a tensor over data, whose length must equal the product of shape; its dtype
// comes from T. Data aliases data's memory (no copy).
func NewTensor[T Element](name string, shape []int64, data []T) (Tensor, error) {
	t := Tensor{Name: name, DType: DTypeOf[T](), Shape: append([]int64(nil), shape...)}
	if n := t.NumElements(); n < 0 || int64(len(data)) != n {
		return Tensor{}, invalid("NewTensor", "tensor '%s': %d elements given, shape %v holds %d", name, len(data), shape, n)
	}
	if len(data) > 0 {
		t.Data = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*int(unsafe.Sizeof(data[0])))
	} else {
		t.Data = []byte{}
	}
	return t, nil
}

// TensorValues copies t's elements into a new []T; T must have t's dtype (Uint16-based BHalf
// for BFloat16, Half for Float16, uint8 for the fp8 dtypes).
func TensorValues[T Element](t Tensor) ([]T, error) {
	want := DTypeOf[T]()
	fp8 := (t.DType == FP8E4M3 || t.DType == FP8E5M2) && want == Uint8
	if want != t.DType && !fp8 {
		return nil, invalid("TensorValues", "tensor '%s' is %s, not %s", t.Name, t.DType, want)
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(t.Data)%size != 0 {
		return nil, invalid("TensorValues", "tensor '%s' holds %d bytes, not a multiple of %d", t.Name, len(t.Data), size)
	}
	out := make([]T, len(t.Data)/size)
	if len(out) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(t.Data)), t.Data)
	}
	return out, nil
}

// checkTensor reports why C could not read t safely (nil when the library may judge the rest).
func checkTensor(t Tensor, op string) error {
	if strings.IndexByte(t.Name, 0) >= 0 {
		return invalid(op, "tensor %q: the name contains a NUL byte", t.Name)
	}
	if len(t.Shape) > int(capi.PSTATE_TENSOR_MAX_NDIM) {
		return invalid(op, "tensor '%s': %d dimensions, at most %d", t.Name, len(t.Shape), capi.PSTATE_TENSOR_MAX_NDIM)
	}
	size := t.DType.Size()
	bytes := int64(size)
	for _, d := range t.Shape {
		if d < 0 || size == 0 {
			return nil // the library refuses it on every rank with its message
		}
		if d > 0 && bytes > (1<<62)/d {
			return invalid(op, "tensor '%s': shape %v is too large", t.Name, t.Shape)
		}
		bytes *= d
	}
	if size != 0 && int64(len(t.Data)) != bytes {
		return invalid(op, "tensor '%s': Data holds %d bytes, %s of shape %v needs %d", t.Name, len(t.Data), t.DType, t.Shape, bytes)
	}
	return nil
}

// tensorArray copies tensors into C memory. A dict the binding refuses becomes a one-tensor dict
// the library refuses on every rank (dtype -1, named "refused by the sender's Go binding: " and
// the reason, which every binding's error text reduces to the reason), so that the receivers
// fail with it instead of waiting; refused is then the binding's own error.
func tensorArray(tensors []Tensor, op string) (arr *capi.TensorArray, refused error) {
	for _, t := range tensors {
		if refused = checkTensor(t, op); refused != nil {
			reason := strings.ReplaceAll(refused.(*Error).Detail, "\x00", "\\0")
			tensors = []Tensor{{Name: "refused by the sender's Go binding: " + reason, DType: -1}}
			break
		}
	}
	arr = capi.NewTensorArray(len(tensors))
	if arr == nil {
		return nil, &Error{Status: StatusNoMemory, Op: op, Detail: "no C memory for the dict's description"}
	}
	for i, t := range tensors {
		if !arr.Set(i, t.Name, int(t.DType), t.Shape, t.Data) {
			arr.Free()
			return nil, &Error{Status: StatusNoMemory, Op: op, Detail: fmt.Sprintf("no C memory for a copy of tensor '%s' (%d bytes)", t.Name, len(t.Data))}
		}
	}
	return arr, refused
}

// sendDict runs send with the dict in C memory; a refused dict still goes out (see tensorArray).
func (g *Group) sendDict(op string, tensors []Tensor, send func(h uintptr, arr *capi.TensorArray) error) error {
	arr, refused := tensorArray(tensors, g.op(op))
	if arr == nil {
		return refused
	}
	defer arr.Free()
	err := g.call(op, func(h uintptr) error { return send(h, arr) })
	if refused != nil {
		return refused
	}
	return err
}

// receiveDict runs recv with a fresh C collector and returns what it collected, in Go memory.
func (g *Group) receiveDict(op string, recv func(h uintptr, d *capi.ReceivedDict) error) ([]Tensor, error) {
	d := capi.NewReceivedDict()
	if d == nil {
		return nil, &Error{Status: StatusNoMemory, Op: g.op(op), Detail: "no C memory for the collector"}
	}
	defer d.Free()
	if err := g.call(op, func(h uintptr) error { return recv(h, d) }); err != nil {
		if name := d.CUDATensor(); name != "" {
			return nil, &Error{Status: StatusUnsupported, Op: g.op(op), Detail: fmt.Sprintf(
				"tensor '%s' is a CUDA tensor: the Go binding receives host tensors only, so it had no memory for it and nothing was transferred (%s)", name, detailOf(err))}
		}
		return nil, err
	}
	received := d.Take()
	out := make([]Tensor, len(received))
	for i, t := range received {
		out[i] = Tensor{Name: t.Name, DType: DType(t.DType), Shape: t.Shape, Data: t.Data}
	}
	return out, nil
}

// BroadcastTensorDict is SGLang's broadcast_tensor_dict: group rank src sends tensors (in order)
// to every other rank, whose argument is ignored (pass nil). It returns tensors itself on src and
// the received dict elsewhere. A dict src cannot send fails on every rank, with its reason.
func (g *Group) BroadcastTensorDict(tensors []Tensor, src int) ([]Tensor, error) {
	if g.info.RankInGroup == src {
		return tensors, g.sendDict("BroadcastTensorDict", tensors, func(h uintptr, arr *capi.TensorArray) error {
			return capi.Broadcast_tensor_dict(h, arr, src, nil, 0)
		})
	}
	return g.receiveDict("BroadcastTensorDict", func(h uintptr, d *capi.ReceivedDict) error {
		return capi.Broadcast_tensor_dict(h, nil, src, d, 0)
	})
}

// SendTensorDict sends tensors to group rank dst, which receives them with RecvTensorDict. A
// dict refused here fails the receiver too.
func (g *Group) SendTensorDict(tensors []Tensor, dst int) error {
	return g.sendDict("SendTensorDict", tensors, func(h uintptr, arr *capi.TensorArray) error {
		return capi.Send_tensor_dict(h, arr, dst, 0)
	})
}

// RecvTensorDict receives the next dict sent by group rank src.
func (g *Group) RecvTensorDict(src int) ([]Tensor, error) {
	return g.receiveDict("RecvTensorDict", func(h uintptr, d *capi.ReceivedDict) error {
		return capi.Recv_tensor_dict(h, src, d, 0)
	})
}
