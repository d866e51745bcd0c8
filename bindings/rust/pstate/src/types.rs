//! The enumerations of pstate.h and the element types slices may hold.
use pstate_sys as sys;

/// pstate_dtype_t (values equal NCCL's ncclDataType_t).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Int8,
    Uint8,
    Int32,
    Uint32,
    Int64,
    Uint64,
    Float16,
    Float32,
    Float64,
    BFloat16,
    /// move-only on CPU: reductions return Status::Unsupported
    Fp8E4M3,
    /// move-only on CPU: reductions return Status::Unsupported
    Fp8E5M2,
}

impl DType {
    pub(crate) fn raw(self) -> sys::pstate_dtype_t {
        sys::pstate_dtype_t(self as u32)
    }

    /// The DType of a C value; None for a number this binding does not know.
    pub(crate) fn from_raw(raw: sys::pstate_dtype_t) -> Option<DType> {
        const ALL: [DType; 12] = [
            DType::Int8,
            DType::Uint8,
            DType::Int32,
            DType::Uint32,
            DType::Int64,
            DType::Uint64,
            DType::Float16,
            DType::Float32,
            DType::Float64,
            DType::BFloat16,
            DType::Fp8E4M3,
            DType::Fp8E5M2,
        ];
        ALL.get(raw.0 as usize).copied()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        unsafe { sys::pstate_dtype_size(self.raw()) }
    }
}

/// pstate_reduce_op_t. Avg is Sum divided by the group size (truncating for integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
}

impl ReduceOp {
    pub(crate) fn raw(self) -> sys::pstate_reduce_op_t {
        sys::pstate_reduce_op_t(self as u32)
    }
}

/// pstate_device_t.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda,
}

/// pstate_engine_t: whose rank layout a [`crate::ParallelConfig`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Engine {
    /// SGLang's initialize_model_parallel (the default): world = TP x PP.
    #[default]
    Sglang,
    /// vLLM's: world = ExternalDP x DP x PP x PCP x TP.
    Vllm,
}

impl Engine {
    pub(crate) fn raw(self) -> sys::pstate_engine_t {
        sys::pstate_engine_t(self as u32)
    }

    /// "sglang" or "vllm" (`pstate layout --engine`).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sglang => "sglang",
            Engine::Vllm => "vllm",
        }
    }
}

/// pstate_group_kind_t: the groups of SGLang's (and vLLM's) parallel_state.py.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    World,
    Tp,
    Pp,
    AttnTp,
    AttnCp,
    MoeEp,
    MoeTp,
    MoeDp,
    Dcp,
    SharedExpertsTp,
    SelfPp,
    /// vLLM's layout ([`Engine::Vllm`]): data parallel.
    Dp,
    /// vLLM: prefill context parallel.
    Pcp,
    /// vLLM: expert parallel over DP x PCP x TP of one pipeline stage (MoE models).
    Ep,
    /// vLLM: EP's ranks on a group of their own, for expert load balancing (MoE models).
    Eplb,
    /// A group made by [`crate::PState::new_group`] (`"custom:<n>"`); not in the layout
    /// ([`crate::PState::group`] refuses it, and [`GroupKind::ALL`] lists the layout kinds).
    /// Kinds from 1000 on are not layout kinds (pstate.h).
    Custom = 1000,
}

impl GroupKind {
    pub(crate) fn raw(self) -> sys::pstate_group_kind_t {
        sys::pstate_group_kind_t(self as u32)
    }

    /// Every kind of the layout, in pstate.h order (all but [`GroupKind::Custom`]).
    pub const ALL: [GroupKind; 15] = [
        GroupKind::World,
        GroupKind::Tp,
        GroupKind::Pp,
        GroupKind::AttnTp,
        GroupKind::AttnCp,
        GroupKind::MoeEp,
        GroupKind::MoeTp,
        GroupKind::MoeDp,
        GroupKind::Dcp,
        GroupKind::SharedExpertsTp,
        GroupKind::SelfPp,
        GroupKind::Dp,
        GroupKind::Pcp,
        GroupKind::Ep,
        GroupKind::Eplb,
    ];

    /// The library's name ("tp").
    pub fn name(self) -> &'static str {
        let p = unsafe { sys::pstate_group_kind_name(self.raw()) };
        unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap_or("?")
    }
}

/// An IEEE float16 element (bit pattern).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct F16(pub u16);

/// A bfloat16 element (bit pattern: the high half of an f32).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Truncating conversion (exact for values with 8 significant bits).
    pub fn from_f32(v: f32) -> Bf16 {
        Bf16((v.to_bits() >> 16) as u16)
    }
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type slices passed to collectives may hold. Sealed: implemented for exactly the C dtypes.
///
/// # Safety
/// Implementors are plain data of DTYPE's size with no invalid bit patterns (the library writes
/// arbitrary bytes of that dtype into them).
pub unsafe trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        unsafe impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(i8 => Int8, u8 => Uint8, i32 => Int32, u32 => Uint32, i64 => Int64, u64 => Uint64,
         f32 => Float32, f64 => Float64, F16 => Float16, Bf16 => BFloat16);
