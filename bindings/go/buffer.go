package pstate

import "unsafe"

// Buffer is the memory one operation reads or writes: a Go slice (host memory, made with
// Slice) or a device address (CUDA contexts, made with DeviceBuffer). The zero Buffer is
// "no buffer" (e.g. Gather's receive buffer on ranks other than dst).
type Buffer struct {
	p      unsafe.Pointer // first element; keeps a Go slice's array alive
	count  int
	dtype  DType
	device bool
}

// Slice is a Go slice as a Buffer; its dtype comes from the element type.
func Slice[T Element](s []T) Buffer {
	b := Buffer{count: len(s), dtype: DTypeOf[T]()}
	if len(s) > 0 {
		b.p = unsafe.Pointer(&s[0])
	}
	return b
}

// DeviceBuffer is count elements of dtype at a device address (cudaMalloc'd memory).
func DeviceBuffer(addr uintptr, count int, dtype DType) Buffer {
	// The address is C/CUDA memory carried as an integer; read it into a pointer-typed word.
	return Buffer{p: *(*unsafe.Pointer)(unsafe.Pointer(&addr)), count: count, dtype: dtype, device: true}
}

// Len is the number of elements.
func (b Buffer) Len() int { return b.count }

// DType is the element type.
func (b Buffer) DType() DType { return b.dtype }

// IsDevice reports whether the buffer is a device address.
func (b Buffer) IsDevice() bool { return b.device }

// check reports an INVALID_ARGUMENT for a dtype outside the enumeration (a DeviceBuffer's), a
// buffer shorter than need, or a nil buffer with elements.
func (b Buffer) check(op, name string, need int) error {
	if !b.dtype.Valid() {
		return invalid(op, "%s: DType(%d) is not a pstate.DType (%s)", name, int(b.dtype), dtypeNames)
	}
	if b.count < 0 {
		return invalid(op, "%s: count %d is negative", name, b.count)
	}
	if b.count < need {
		return invalid(op, "%s holds %d elements, the operation needs %d", name, b.count, need)
	}
	if b.p == nil && need > 0 {
		return invalid(op, "%s is empty", name)
	}
	return nil
}

// rootBuffer checks the buffer that only the root of a rooted call uses (Gather's and Reduce's
// recv, Scatter's send): on the root it must be there (not Buffer{}), of the other buffer's
// dtype, with need elements.
func rootBuffer(op, name, role string, rank int, b Buffer, dtype DType, need int) error {
	if b == (Buffer{}) && need > 0 {
		return invalid(op, "%s is Buffer{} on %s (group rank %d), which needs %d %s elements there: pass "+
			"pstate.Slice of them (Buffer{} is for the other ranks)", name, role, rank, need, dtype)
	}
	if b.count == 0 && need == 0 {
		return nil // nothing moves; an empty buffer of any dtype will do
	}
	if b.dtype != dtype {
		other := map[string]string{"recv": "send", "send": "recv"}[name]
		return invalid(op, "%s is %s but %s is %s", other, dtype, name, b.dtype)
	}
	return b.check(op, name, need)
}

func sameDType(op string, a, b Buffer) error {
	if a.dtype != b.dtype {
		return invalid(op, "send is %s but recv is %s", a.dtype, b.dtype)
	}
	return nil
}
