//! Tensor dicts: SGLang's broadcast_tensor_dict / send_tensor_dict / recv_tensor_dict over
//! owned Rust tensors.
//!
//! A dict is a `Vec<Tensor>` in order (the C API's order; names unique). Sending borrows the
//! tensors' names (copied into `CString`s), shapes and bytes for the duration of the call: no
//! copy of the data. Receiving passes the C API an `extern "C"` allocation callback (`collect`)
//! and a pointer to a `Collector`: for each tensor the library announces, the callback
//! allocates a zeroed `Vec<u8>` (fallibly: no memory is a NULL, which the library reports as
//! NO_MEMORY, never an abort), records the tensor and returns the vector's buffer, which the
//! library fills; the collected tensors are the result. The callback never unwinds into C.
//! Host memory only: a CUDA tensor gets no memory (the call fails on every rank, nothing is
//! transferred) and the error says why.
use crate::error::check;
use crate::{DType, Element, Error, Group, Result, Status};
use pstate_sys as sys;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::{c_char, c_int};
use std::ptr;

/// One named tensor of a dict, in host memory: `data` holds the elements row-major, exactly
/// `numel() * dtype.size()` bytes. An empty `shape` is a scalar (one element); an extent of 0
/// makes an empty tensor. Every dtype travels (bfloat16 and fp8 included: data is bytes);
/// [`Tensor::from_slice`] and [`Tensor::to_vec`] convert from and to typed slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// A tensor over `data`, checked: its length must be what dtype and shape need.
    pub fn new(name: impl Into<String>, dtype: DType, shape: Vec<i64>, data: Vec<u8>) -> Result<Tensor> {
        let t = Tensor { name: name.into(), dtype, shape, data };
        let need = t.byte_size().map_err(|e| e.during("Tensor::new"))?;
        if t.data.len() != need {
            return Err(t.invalid(format!("data holds {} bytes, {:?} of shape {:?} needs {need}", t.data.len(), t.dtype, t.shape)).during("Tensor::new"));
        }
        Ok(t)
    }

    /// A tensor of `values` (copied), dtype from `T`; `values.len()` must be the shape's product.
    pub fn from_slice<T: Element>(name: impl Into<String>, shape: &[i64], values: &[T]) -> Result<Tensor> {
        // SAFETY: Element types are plain data without padding (the trait's contract).
        let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values)) };
        Tensor::new(name, T::DTYPE, shape.to_vec(), bytes.to_vec())
    }

    /// The elements as a `Vec<T>` (copied). `T` must be the tensor's dtype (`u8` for the fp8
    /// dtypes, [`crate::Bf16`] for bfloat16, [`crate::F16`] for float16).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let fp8 = matches!(self.dtype, DType::Fp8E4M3 | DType::Fp8E5M2) && T::DTYPE == DType::Uint8;
        if T::DTYPE != self.dtype && !fp8 {
            return Err(self.invalid(format!("is {:?}, not {:?}", self.dtype, T::DTYPE)).during("Tensor::to_vec"));
        }
        let size = std::mem::size_of::<T>();
        if self.data.len() % size != 0 {
            return Err(self.invalid(format!("holds {} bytes, not a multiple of {size}", self.data.len())).during("Tensor::to_vec"));
        }
        let n = self.data.len() / size;
        let mut out: Vec<T> = Vec::with_capacity(n);
        // SAFETY: out has room for n elements = data.len() bytes; every bit pattern is a valid
        // Element (the trait's contract), so the bytes make n initialized values.
        unsafe {
            ptr::copy_nonoverlapping(self.data.as_ptr(), out.as_mut_ptr().cast::<u8>(), self.data.len());
            out.set_len(n);
        }
        Ok(out)
    }

    /// The number of elements: the product of the extents (1 for a scalar); None when an
    /// extent is negative or the product overflows.
    pub fn numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| usize::try_from(d).ok().and_then(|d| n.checked_mul(d)))
    }

    /// Bytes the dtype and shape need.
    fn byte_size(&self) -> Result<usize> {
        self.numel()
            .and_then(|n| n.checked_mul(self.dtype.size()))
            .ok_or_else(|| self.invalid(format!("shape {:?} has a negative extent or too many bytes", self.shape)))
    }

    fn invalid(&self, what: String) -> Error {
        Error::new(Status::InvalidArgument, format!("tensor '{}': {what}", self.name))
    }
}

/// The C view of a dict to send: pointers into the tensors (valid while they are borrowed).
pub(crate) struct CDict {
    _names: Vec<CString>,
    tensors: Vec<sys::pstate_tensor_t>,
}

impl CDict {
    /// The dict as the C API reads it, or the first reason the binding refuses it (C would read
    /// past a tensor's data, or a name is not a C string).
    fn new(tensors: &[Tensor]) -> Result<CDict> {
        let mut names = Vec::with_capacity(tensors.len());
        let mut out = Vec::with_capacity(tensors.len());
        for t in tensors {
            if t.data.len() != t.byte_size()? {
                return Err(t.invalid(format!("data holds {} bytes, {:?} of shape {:?} needs {}", t.data.len(), t.dtype, t.shape, t.byte_size()?)));
            }
            let name = CString::new(t.name.as_str()).map_err(|_| t.invalid("the name contains a NUL byte".into()))?;
            let ndim = c_int::try_from(t.shape.len()).map_err(|_| t.invalid("too many dimensions".into()))?;
            out.push(sys::pstate_tensor_t {
                name: name.as_ptr(),
                dtype: t.dtype.raw(),
                ndim,
                shape: t.shape.as_ptr(),
                data: t.data.as_ptr().cast(),
                ..sys::pstate_tensor_init() // struct_size, the array's stride (pstate.h); device CPU
            });
            names.push(name); // the CString's heap buffer does not move with it
        }
        Ok(CDict { _names: names, tensors: out })
    }

    /// A one-tensor dict the library refuses on every rank (dtype -1), named with the binding's
    /// reason, so that the receivers fail with it instead of waiting for a dict.
    fn refusal(reason: &Error) -> CDict {
        let text = format!("refused by the sender's Rust binding: {}", reason.detail).replace('\0', "\\0");
        let name = CString::new(text).unwrap_or_default();
        let tensor = sys::pstate_tensor_t {
            name: name.as_ptr(),
            dtype: sys::pstate_dtype_t(u32::MAX), // -1 as a C int: not a pstate_dtype_t
            ..sys::pstate_tensor_init()
        };
        CDict { _names: vec![name], tensors: vec![tensor] }
    }

    pub(crate) fn ptr(&self) -> *const sys::pstate_tensor_t {
        self.tensors.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.tensors.len()
    }
}

/// What the allocation callback gathered during one receiving call.
#[derive(Default)]
struct Collector {
    tensors: Vec<Tensor>,
    /// Why a tensor got no memory although the library could have sent it (a CUDA tensor, a
    /// dtype this binding does not know): the call's NO_MEMORY is reported as this instead.
    refused: Option<String>,
}

impl Collector {
    /// One tensor: records it and returns its buffer (null for 0 bytes or when refused).
    fn take(&mut self, name: String, dtype: sys::pstate_dtype_t, shape: Vec<i64>, bytes: usize, device: sys::pstate_device_t) -> *mut c_void {
        if device != sys::pstate_device_t::PSTATE_DEVICE_CPU && bytes > 0 {
            self.refused.get_or_insert(format!("tensor '{name}' is a CUDA tensor; the Rust binding receives host tensors only"));
            return ptr::null_mut();
        }
        let dtype = match DType::from_raw(dtype) {
            Some(d) => d,
            None => {
                self.refused.get_or_insert(format!("tensor '{name}' has dtype {}, which this binding does not know", dtype.0));
                return ptr::null_mut();
            }
        };
        let data = match zeroed(bytes) {
            Some(v) => v,
            None => return ptr::null_mut(),
        };
        let mut t = Tensor { name, dtype, shape, data };
        let p = if bytes > 0 { t.data.as_mut_ptr().cast() } else { ptr::null_mut() };
        self.tensors.push(t); // moving the Vec keeps its heap buffer where p points
        p
    }
}

/// A zeroed buffer of n bytes, or None when the allocator has none (instead of aborting).
fn zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: layout has a non-zero size; a non-null result is n zeroed bytes from the global
    // allocator with u8's alignment, which is what Vec<u8> of capacity n owns.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
}

/// The pstate_alloc_fn of this crate; user is the `Collector` of the receiving call. Called by
/// the library on the calling thread, during the call; never unwinds into C.
unsafe extern "C" fn collect(
    user: *mut c_void,
    name: *const c_char,
    dtype: sys::pstate_dtype_t,
    ndim: c_int,
    shape: *const i64,
    bytes: usize,
    device: sys::pstate_device_t,
) -> *mut c_void {
    let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: user is the &mut Collector receive() passed for this call only; name and
        // shape are valid during the callback (pstate.h), ndim entries of shape.
        let collector = unsafe { &mut *user.cast::<Collector>() };
        let name = if name.is_null() { String::new() } else { unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned() };
        let ndim = usize::try_from(ndim).unwrap_or(0);
        let shape = if ndim == 0 || shape.is_null() { Vec::new() } else { unsafe { std::slice::from_raw_parts(shape, ndim) }.to_vec() };
        collector.take(name, dtype, shape, bytes, device)
    }));
    step.unwrap_or(ptr::null_mut())
}

impl Group<'_> {
    /// SGLang's broadcast_tensor_dict: group rank `src` sends `tensors` (in order) to every other
    /// rank, whose `tensors` is ignored (pass `Vec::new()`). Returns `tensors` itself on src and
    /// the received dict elsewhere. A dict src cannot send fails on every rank with its reason.
    pub fn broadcast_tensor_dict(&self, tensors: Vec<Tensor>, src: usize) -> Result<Vec<Tensor>> {
        let src_i = self.rank_of("broadcast_tensor_dict", "src", src)?;
        if self.rank_in_group() == src {
            self.send_dict("broadcast_tensor_dict", &tensors, |dict| unsafe {
                sys::pstate_broadcast_tensor_dict(self.g(), dict.ptr(), dict.len(), src_i, None, ptr::null_mut(), ptr::null_mut())
            })?;
            return Ok(tensors);
        }
        self.receive_dict(|alloc, user| unsafe {
            sys::pstate_broadcast_tensor_dict(self.g(), ptr::null(), 0, src_i, alloc, user, ptr::null_mut())
        })
    }

    /// SGLang's send_tensor_dict: sends `tensors` to group rank `dst`, which receives them with
    /// [`Group::recv_tensor_dict`]. A dict refused here fails the receiver too.
    pub fn send_tensor_dict(&self, tensors: &[Tensor], dst: usize) -> Result<()> {
        let dst = self.rank_of("send_tensor_dict", "dst", dst)?;
        self.send_dict("send_tensor_dict", tensors, |dict| unsafe { sys::pstate_send_tensor_dict(self.g(), dict.ptr(), dict.len(), dst, ptr::null_mut()) })
    }

    /// SGLang's recv_tensor_dict: the next dict sent by group rank `src`.
    pub fn recv_tensor_dict(&self, src: usize) -> Result<Vec<Tensor>> {
        let src = self.rank_of("recv_tensor_dict", "src", src)?;
        self.receive_dict(|alloc, user| unsafe { sys::pstate_recv_tensor_dict(self.g(), src, alloc, user, ptr::null_mut()) })
    }

    /// Runs send with the C view of tensors; a dict the binding refuses is still sent, as one the
    /// library refuses (with the reason alone), and the binding's error is returned, naming
    /// `method` on this group.
    pub(crate) fn send_dict(&self, method: &str, tensors: &[Tensor], send: impl Fn(&CDict) -> sys::pstate_status_t) -> Result<()> {
        match CDict::new(tensors) {
            Ok(dict) => check(send(&dict)),
            Err(refused) => {
                let _ = send(&CDict::refusal(&refused));
                Err(refused.during(&self.op(method)))
            }
        }
    }

    /// Runs recv with this crate's allocation callback and returns what it collected.
    pub(crate) fn receive_dict(&self, recv: impl FnOnce(sys::pstate_alloc_fn, *mut c_void) -> sys::pstate_status_t) -> Result<Vec<Tensor>> {
        let mut collector = Collector::default();
        let status = recv(Some(collect), (&mut collector as *mut Collector).cast());
        match (check(status), collector.refused) {
            (Ok(()), _) => Ok(collector.tensors),
            (Err(e), Some(why)) if e.status == Status::NoMemory => Err(Error::new(
                Status::Unsupported,
                format!("{why}, so it had no memory for it and nothing was transferred ({})", e.detail),
            )),
            (Err(e), _) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(c: &mut Collector, name: &str, dtype: u32, shape: &[i64], bytes: usize, device: sys::pstate_device_t) -> *mut c_void {
        let name = CString::new(name).unwrap();
        unsafe {
            collect((c as *mut Collector).cast(), name.as_ptr(), sys::pstate_dtype_t(dtype), shape.len() as c_int, shape.as_ptr(), bytes, device)
        }
    }

    #[test]
    fn collector_allocates_zeroed_host_memory_and_records_the_tensor() {
        let mut c = Collector::default();
        let p = offer(&mut c, "w", 7, &[2, 3], 24, sys::pstate_device_t::PSTATE_DEVICE_CPU);
        assert!(!p.is_null());
        assert_eq!(c.tensors, vec![Tensor { name: "w".into(), dtype: DType::Float32, shape: vec![2, 3], data: vec![0; 24] }]);
        assert_eq!(p.cast::<u8>(), c.tensors[0].data.as_mut_ptr());
    }

    #[test]
    fn collector_gives_empty_tensors_no_memory_but_keeps_them() {
        let mut c = Collector::default();
        assert!(offer(&mut c, "e", 1, &[0, 4], 0, sys::pstate_device_t::PSTATE_DEVICE_CPU).is_null());
        assert_eq!((c.tensors.len(), c.tensors[0].shape.clone(), c.refused.is_none()), (1, vec![0, 4], true));
    }

    #[test]
    fn collector_refuses_cuda_tensors_and_says_why() {
        let mut c = Collector::default();
        assert!(offer(&mut c, "kv", 7, &[4], 16, sys::pstate_device_t::PSTATE_DEVICE_CUDA).is_null());
        assert!(c.tensors.is_empty());
        assert!(c.refused.unwrap().contains("'kv' is a CUDA tensor"));
    }

    #[test]
    fn collector_refuses_a_dtype_it_does_not_know() {
        let mut c = Collector::default();
        assert!(offer(&mut c, "x", 99, &[1], 1, sys::pstate_device_t::PSTATE_DEVICE_CPU).is_null());
        assert!(c.refused.unwrap().contains("dtype 99"));
    }
}
