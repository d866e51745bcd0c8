//! Error: a failed call's status and the text pstate_last_error() gave on the failing thread, with
//! the library's C names said the Rust way (rust_names: "call pstate_abort" -> "call
//! PState::abort", "PSTATE_DEVICE_CPU" -> "Device::Cpu") and a tensor dict another rank's binding
//! refused reduced to that binding's reason.
use pstate_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// The kind of a failure: pstate_status_t's failures, and [`Status::NotLoaded`] when libpstate
/// itself could not be loaded. Never `Ok` (success is `Result::Ok`). Displayed as a short text
/// ("busy", "peer lost"); [`Status::name`] is the C name. Non-exhaustive: newer versions add
/// statuses (the library appends them), so a `match` needs a `_` arm:
///
/// ```compile_fail,E0004
/// // every status listed, no `_` arm: refused, since a newer version may add one
/// use pstate::Status::*;
/// fn retry(s: pstate::Status) -> bool {
///     match s {
///         Timeout | Busy => true,
///         InvalidArgument | InvalidState | Unsupported | NoMemory | PeerLost | Transport | Mismatch
///         | Auth | Aborted | Internal | Interrupted | NotLoaded | Unknown(_) => false,
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// An argument was refused (the detail names it and what is allowed).
    InvalidArgument,
    /// A call out of order (the detail names the step expected), or on a failed PState.
    InvalidState,
    /// Not supported here (a dtype on CPU, a CUDA call in a CPU context, an older library).
    Unsupported,
    /// Out of memory (host, shared memory or device).
    NoMemory,
    /// A peer did not answer before the deadline: abort next.
    Timeout,
    /// A peer's process is gone: abort or shrink next.
    PeerLost,
    /// The network or shared-memory transport failed.
    Transport,
    /// Ranks disagree about a call (kind, count, dtype, op, root): both sides are named.
    Mismatch,
    /// The job token did not match.
    Auth,
    /// The PState was aborted (by an [`AbortHandle`](crate::AbortHandle), an interrupt or a
    /// failure): abort it next.
    Aborted,
    /// A bug of pstate: please report it.
    Internal,
    /// The wait was stopped by an [`InterruptHandle`](crate::InterruptHandle): abort next.
    Interrupted,
    /// Another thread is inside a call on the same context (or request): nothing was done.
    Busy,
    /// libpstate could not be loaded (`pstate-sys` found no usable `libpstate.so.1`): nothing
    /// was called. The detail says what was tried and the fixes: `LD_LIBRARY_PATH`,
    /// `PSTATE_LIBRARY`, or a rebuild with `PSTATE_LIB_DIR`. Its C number is
    /// `PSTATE_ERR_UNSUPPORTED`, what pstate-sys returns then.
    NotLoaded,
    /// A status number this binding does not know (a newer library).
    Unknown(u32),
}

/// The C names of pstate_status_t (pstate.h: stable numbers, never reused), indexed by number.
const C_NAMES: [&str; 14] = [
    "PSTATE_OK",
    "PSTATE_ERR_INVALID_ARGUMENT",
    "PSTATE_ERR_INVALID_STATE",
    "PSTATE_ERR_UNSUPPORTED",
    "PSTATE_ERR_NO_MEMORY",
    "PSTATE_ERR_TIMEOUT",
    "PSTATE_ERR_PEER_LOST",
    "PSTATE_ERR_TRANSPORT",
    "PSTATE_ERR_MISMATCH",
    "PSTATE_ERR_AUTH",
    "PSTATE_ERR_ABORTED",
    "PSTATE_ERR_INTERNAL",
    "PSTATE_ERR_INTERRUPTED",
    "PSTATE_ERR_BUSY",
];

impl Status {
    /// The status of a C result number (None for PSTATE_OK).
    pub fn from_raw(raw: u32) -> Option<Status> {
        Some(match raw {
            0 => return None,
            1 => Status::InvalidArgument,
            2 => Status::InvalidState,
            3 => Status::Unsupported,
            4 => Status::NoMemory,
            5 => Status::Timeout,
            6 => Status::PeerLost,
            7 => Status::Transport,
            8 => Status::Mismatch,
            9 => Status::Auth,
            10 => Status::Aborted,
            11 => Status::Internal,
            12 => Status::Interrupted,
            13 => Status::Busy,
            n => Status::Unknown(n),
        })
    }

    /// The C number (`NotLoaded`: 3, PSTATE_ERR_UNSUPPORTED).
    pub fn raw(self) -> u32 {
        match self {
            Status::InvalidArgument => 1,
            Status::InvalidState => 2,
            Status::Unsupported | Status::NotLoaded => 3,
            Status::NoMemory => 4,
            Status::Timeout => 5,
            Status::PeerLost => 6,
            Status::Transport => 7,
            Status::Mismatch => 8,
            Status::Auth => 9,
            Status::Aborted => 10,
            Status::Internal => 11,
            Status::Interrupted => 12,
            Status::Busy => 13,
            Status::Unknown(n) => n,
        }
    }

    /// The C name ("PSTATE_ERR_TIMEOUT"); known without the library, so also when it could not
    /// be loaded. A number this binding does not know: the loaded library's name for it, else
    /// "PSTATE_UNKNOWN_STATUS".
    pub fn name(self) -> &'static str {
        if let Some(name) = C_NAMES.get(self.raw() as usize) {
            return name;
        }
        if sys::loaded_table().is_none() {
            return "PSTATE_UNKNOWN_STATUS";
        }
        // Static strings owned by the library.
        let p = unsafe { sys::pstate_status_string(sys::pstate_status_t(self.raw())) };
        if p.is_null() {
            return "PSTATE_UNKNOWN_STATUS";
        }
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("PSTATE_UNKNOWN_STATUS")
    }
}

impl fmt::Display for Status {
    /// A short text: "invalid argument", "busy", "libpstate not loaded", "unknown status 42".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Status::InvalidArgument => "invalid argument",
            Status::InvalidState => "invalid state",
            Status::Unsupported => "unsupported",
            Status::NoMemory => "out of memory",
            Status::Timeout => "timeout",
            Status::PeerLost => "peer lost",
            Status::Transport => "transport error",
            Status::Mismatch => "mismatch",
            Status::Auth => "authentication failed",
            Status::Aborted => "aborted",
            Status::Internal => "internal error",
            Status::Interrupted => "interrupted",
            Status::Busy => "busy",
            Status::NotLoaded => "libpstate not loaded",
            Status::Unknown(n) => return write!(f, "unknown status {n}"),
        };
        f.write_str(text)
    }
}

/// A failed pstate call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub status: Status,
    /// pstate_last_error() right after the call (or the binding's own explanation).
    pub detail: String,
}

impl Error {
    pub(crate) fn new(status: Status, detail: impl Into<String>) -> Error {
        Error { status, detail: detail.into() }
    }

    /// The error with the call named in front ("Tensor::new: tensor 'x': ...").
    pub(crate) fn during(self, op: &str) -> Error {
        Error { status: self.status, detail: format!("{op}: {}", self.detail) }
    }

    /// True for Timeout (the peer may still come back: abort is still the safe reaction).
    pub fn is_timeout(&self) -> bool {
        self.status == Status::Timeout
    }

    /// True for PeerLost.
    pub fn is_peer_lost(&self) -> bool {
        self.status == Status::PeerLost
    }
}

impl fmt::Display for Error {
    /// `"<status>: <detail>"`, e.g. "invalid state: PState::group: ... call
    /// PState::initialize_model_parallel first".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.status)
        } else {
            write!(f, "{}: {}", self.status, self.detail)
        }
    }
}

impl std::error::Error for Error {}

/// The result of every fallible call.
pub type Result<T> = std::result::Result<T, Error>;

/// Ok(()) for PSTATE_OK, else the error with this thread's last_error text. Must be called on
/// the thread that made the call, right after it (the text is thread-local).
pub(crate) fn check(status: sys::pstate_status_t) -> Result<()> {
    match Status::from_raw(status.0) {
        None => Ok(()),
        Some(s) => {
            let p = unsafe { sys::pstate_last_error() };
            let detail = if p.is_null() { String::new() } else { unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned() };
            let s = if s == Status::Unsupported && sys::loaded_table().is_none() { Status::NotLoaded } else { s };
            Err(Error::new(s, rust_names(&detail)))
        }
    }
}

/// The Rust name of a C name of pstate.h in an error text; None leaves it as it is.
fn rust_name(c: &str) -> Option<String> {
    let fixed = match c {
        "pstate_init" => "PState::init",
        "pstate_abort" => "PState::abort",
        "pstate_revoke" => "AbortHandle::abort",
        "pstate_finalize" => "PState::finalize",
        "pstate_shrink" => "PState::shrink",
        "pstate_grow" => "PState::grow",
        "pstate_live_ranks" => "PState::live_ranks",
        "pstate_initialize_model_parallel" => "PState::initialize_model_parallel",
        "pstate_destroy_model_parallel" => "PState::destroy_model_parallel",
        "pstate_get_group" => "PState::group",
        "pstate_graph_capture_begin" => "PState::graph_capture",
        "pstate_graph_capture_end" => "GraphCapture::end",
        "pstate_tp_allreduce" => "PState::tp_all_reduce",
        "pstate_tp_allgather" => "PState::tp_all_gather",
        "pstate_set_interrupt_check" => "InterruptHandle",
        "pstate_trace_dump" => "PState::trace_dump",
        "pstate_new_group" => "PState::new_group",
        "pstate_layout_create" => "Layout::new",
        "pstate_layout_group_count" => "Layout::group_count",
        "pstate_layout_group_ranks" => "Layout::group_ranks",
        "pstate_layout_group_of" => "Layout::group_of",
        "pstate_group_ranks" => "Group::ranks",
        "pstate_group_same_node" => "Group::same_node",
        "pstate_group_info" => "Group::info",
        "pstate_group_set_timeout" => "Group::set_timeout",
        "pstate_group_timeout" => "Group::timeout",
        "pstate_wait" => "Request::wait",
        "pstate_test" => "Request::test",
        "pstate_t" => "PState",
        "pstate_group_t" => "Group",
        "pstate_dtype_t" => "DType",
        "pstate_reduce_op_t" => "ReduceOp",
        "pstate_group_kind_t" => "GroupKind",
        "pstate_device_t" => "Device",
        "pstate_parallel_config_t" => "ParallelConfig",
        "pstate_engine_t" => "Engine",
        "pstate_tensor_t" => "Tensor",
        "PSTATE_DEVICE_CPU" => "Device::Cpu",
        "PSTATE_DEVICE_CUDA" => "Device::Cuda",
        "PSTATE_BFLOAT16" => "DType::BFloat16",
        "PSTATE_FP8_E4M3" => "DType::Fp8E4M3",
        "PSTATE_FP8_E5M2" => "DType::Fp8E5M2",
        _ => {
            if let Some(rest) = c.strip_prefix("pstate_") {
                return (!rest.is_empty()).then(|| rest.to_owned());
            }
            return enum_constant(c);
        }
    };
    Some(fixed.to_owned())
}

/// The Rust name of a constant of pstate.h's enumerations ("PSTATE_GROUP_ATTN_TP" ->
/// "GroupKind::AttnTp", "PSTATE_ERR_BUSY" -> "Status::Busy", "PSTATE_FLOAT32" ->
/// "DType::Float32"); None for any other PSTATE_ name (environment variables stay as they are).
fn enum_constant(c: &str) -> Option<String> {
    const DTYPES: [&str; 7] = ["INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FLOAT16"];
    const MORE_DTYPES: [&str; 2] = ["FLOAT32", "FLOAT64"];
    const OPS: [&str; 5] = ["SUM", "PROD", "MAX", "MIN", "AVG"];
    const KINDS: [&str; 16] = [
        "WORLD", "TP", "PP", "ATTN_TP", "ATTN_CP", "MOE_EP", "MOE_TP", "MOE_DP", "DCP", "SHARED_EXPERTS_TP", "SELF_PP", "DP", "PCP",
        "EP", "EPLB", "CUSTOM",
    ];
    let camel = |s: &str| -> String {
        s.split('_').map(|w| w.chars().next().map_or(String::new(), |f| f.to_string() + &w[1..].to_ascii_lowercase())).collect()
    };
    let name = c.strip_prefix("PSTATE_")?;
    if let Some(kind) = name.strip_prefix("GROUP_").filter(|k| KINDS.contains(k)) {
        return Some(format!("GroupKind::{}", camel(kind)));
    }
    if let Some(engine) = name.strip_prefix("ENGINE_").filter(|e| ["SGLANG", "VLLM"].contains(e)) {
        return Some(format!("Engine::{}", camel(engine)));
    }
    if let Some(err) = name.strip_prefix("ERR_") {
        let status = camel(err);
        let known = (1..=13).filter_map(Status::from_raw).any(|s| format!("{s:?}") == status);
        return known.then(|| format!("Status::{status}"));
    }
    if DTYPES.contains(&name) || MORE_DTYPES.contains(&name) {
        return Some(format!("DType::{}", camel(name)));
    }
    OPS.contains(&name).then(|| format!("ReduceOp::{}", camel(name)))
}

/// The library's text without a repeated operation: "pstate_new_group: pstate_new_group: ..."
/// and "pstate_all_reduce: tp:0 all_reduce: ..." name the call once ("pstate_new_group: ...",
/// "tp:0 all_reduce: ...").
fn call_named_once(detail: &str) -> &str {
    let Some((function, rest)) = detail.split_once(": ") else { return detail };
    let Some(op) = function.strip_prefix("pstate_").filter(|op| !op.is_empty() && op.chars().all(is_word)) else {
        return detail;
    };
    if rest.starts_with(&format!("{function}: ")) {
        return rest;
    }
    let head = rest.split(": ").next().unwrap_or("");
    if head.len() < rest.len() && head.split(|c: char| !is_word(c)).any(|w| w == op) {
        return rest;
    }
    detail
}

/// InitOptions' field for a pstate_init_params_t field.
fn option_field(c: &str) -> &str {
    match c {
        "timeout_ms" => "timeout",
        other => other,
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The reason inside the library's refusal of a stand-in dict that another rank's binding sent
/// ("... tensor 0 ('refused by the sender's Go binding: REASON'): dtype -1 is not a
/// pstate_dtype_t"), said as "REASON (its Go binding refused it)".
fn binding_refusal(detail: &str) -> String {
    const MARK: &str = "refused by the sender's ";
    const TAIL: &str = "'): dtype -1 is not a pstate_dtype_t";
    const RECEIVER: &str = "refused its dict: ";
    let found = detail.find(MARK).zip(detail.rfind(TAIL)).filter(|&(mark, tail)| mark < tail).and_then(|(mark, tail)| {
        let open = detail[..mark].rfind("tensor 0 ('")?;
        let (binding, reason) = detail[mark + MARK.len()..tail].split_once(" binding: ")?;
        Some((open, binding, reason, tail))
    });
    match found {
        Some((open, binding, reason, tail)) => {
            // the receiver's "... refused its dict: ", without the "<group> <op>: " of the sender's text
            let head = &detail[..open];
            let head = head.rfind(RECEIVER).map_or(head, |at| &head[..at + RECEIVER.len()]);
            format!("{head}{reason} (its {binding} binding refused it){}", &detail[tail + TAIL.len()..])
        }
        None => detail.to_owned(),
    }
}

/// A pstate_last_error() text with its C names said the Rust way.
pub(crate) fn rust_names(detail: &str) -> String {
    let detail = binding_refusal(call_named_once(detail))
        .replace("call pstate_graph_capture_end first", "drop the GraphCapture guard first")
        .replace("device = PSTATE_DEVICE_CPU", "device: Device::Cpu")
        .replace("device = PSTATE_DEVICE_CUDA", "device: Device::Cuda");
    let mut out = String::with_capacity(detail.len());
    let mut rest = detail.as_str();
    while let Some(at) = rest.find(|c: char| c == 'p' || c == 'P') {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let boundary = !out.chars().next_back().map_or(false, is_word);
        let word_len = from.find(|c: char| !is_word(c)).unwrap_or(from.len());
        let word = &from[..word_len];
        let field = |prefix: &str| from.strip_prefix(prefix).map(|f| &f[..f.find(|c: char| !is_word(c)).unwrap_or(f.len())]);
        if boundary {
            for prefix in ["pstate_init_params_t.", "params->"] {
                if let Some(f) = field(prefix).filter(|f| !f.is_empty()) {
                    out.push_str(&format!("InitOptions::{}", option_field(f)));
                    rest = &from[prefix.len() + f.len()..];
                    break;
                }
            }
            if rest.len() < from.len() {
                continue;
            }
            if let Some(name) = (word.starts_with("pstate_") || word.starts_with("PSTATE_")).then(|| rust_name(word)).flatten() {
                out.push_str(&name);
                rest = &from[word_len..];
                continue;
            }
        }
        out.push_str(&from[..word_len.max(1)]);
        rest = &from[word_len.max(1)..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::rust_names;

    #[test]
    fn c_names_become_rust_names() {
        assert_eq!(
            rust_names("pstate_all_reduce: tp:0 all_reduce: rank 1 exited; the job cannot continue: call pstate_abort"),
            "tp:0 all_reduce: rank 1 exited; the job cannot continue: call PState::abort"
        );
        assert_eq!(
            rust_names("pstate_init: set pstate_init_params_t.world_size and pstate_init_params_t.rank, or use PSTATE_DEVICE_CPU"),
            "PState::init: set InitOptions::world_size and InitOptions::rank, or use Device::Cpu"
        );
        assert_eq!(
            rust_names("rank 1 exited; the job cannot continue as it is: call pstate_shrink (survivors go on) or pstate_abort; see pstate_live_ranks, pstate_grow"),
            "rank 1 exited; the job cannot continue as it is: call PState::shrink (survivors go on) or PState::abort; see PState::live_ranks, PState::grow"
        );
        assert_eq!(
            rust_names("params->timeout_ms is negative; libpstate.so; PSTATE_ERR_ABORTED; PSTATE_TRACE_DIR; PSTATE_ERR_NOPE"),
            "InitOptions::timeout is negative; libpstate.so; Status::Aborted; PSTATE_TRACE_DIR; PSTATE_ERR_NOPE"
        );
    }

    /// Before: "new_group: new_group: ...", "all_reduce: tp:0 all_reduce: ...",
    /// "... (e.g. its PSTATE_GROUP_ATTN_TP)", "kind PSTATE_GROUP_CUSTOM".
    #[test]
    fn the_operation_is_named_once_in_rust_names() {
        assert_eq!(
            rust_names("pstate_new_group: pstate_new_group: rank 2 passed [0, 2], rank 0 passed [0, 1]: pass one list"),
            "PState::new_group: rank 2 passed [0, 2], rank 0 passed [0, 1]: pass one list"
        );
        assert_eq!(rust_names("pstate_shrink: pstate_shrink: the context is finalized"), "PState::shrink: the context is finalized");
        assert_eq!(rust_names("pstate_barrier: tp:0 barrier: rank 1 exited"), "tp:0 barrier: rank 1 exited");
        assert_eq!(rust_names("pstate_get_group: call pstate_initialize_model_parallel first"), "PState::group: call PState::initialize_model_parallel first");
        assert_eq!(
            rust_names("pstate_recv_tensor_dict_sliced: ag is tp:0 (pass a group of the same context (e.g. its PSTATE_GROUP_ATTN_TP)); kind PSTATE_GROUP_CUSTOM"),
            "recv_tensor_dict_sliced: ag is tp:0 (pass a group of the same context (e.g. its GroupKind::AttnTp)); kind GroupKind::Custom"
        );
        assert_eq!(rust_names("PSTATE_BFLOAT16 PSTATE_FP8_E4M3 PSTATE_FLOAT32 PSTATE_MAX"), "DType::BFloat16 DType::Fp8E4M3 DType::Float32 ReduceOp::Max");
    }

    #[test]
    fn a_dict_refused_by_a_binding_reads_as_its_reason() {
        let lib = "pstate_recv_tensor_dict: pp:0 send_tensor_dict: group rank 1 refused its dict: pp:0 send_tensor_dict: \
                   tensor 0 ('refused by the sender's Go binding: tensor 'x': Data holds 3 bytes'): dtype -1 is not a pstate_dtype_t";
        assert_eq!(
            rust_names(lib),
            "recv_tensor_dict: pp:0 send_tensor_dict: group rank 1 refused its dict: tensor 'x': Data holds 3 bytes (its Go binding refused it)"
        );
    }
}
