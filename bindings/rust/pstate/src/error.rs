//! Error: a failed call's status and the text pstate_last_error() gave on the failing thread, with
//! the library's C names said the Rust way (rust_names: "call pstate_abort" -> "call
//! PState::abort", "PSTATE_DEVICE_CPU" -> "Device::Cpu") and a tensor dict another rank's binding
//! refused reduced to that binding's reason.
use pstate_sys as sys;
use std::ffi::CStr;
use std::fmt;

/// pstate_status_t of a failure (never `Ok`: success is `Result::Ok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArgument,
    InvalidState,
    Unsupported,
    NoMemory,
    Timeout,
    PeerLost,
    Transport,
    Mismatch,
    Auth,
    Aborted,
    Internal,
    /// The wait was stopped by an [`InterruptHandle`](crate::InterruptHandle): abort next.
    Interrupted,
    /// Another thread is inside a call on the same context (or request): nothing was done.
    Busy,
    /// A status number this binding does not know (a newer library).
    Unknown(u32),
}

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

    /// The C number.
    pub fn raw(self) -> u32 {
        match self {
            Status::InvalidArgument => 1,
            Status::InvalidState => 2,
            Status::Unsupported => 3,
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

    /// The C name ("PSTATE_ERR_TIMEOUT").
    pub fn name(self) -> &'static str {
        // Static strings owned by the library.
        let p = unsafe { sys::pstate_status_string(sys::pstate_status_t(self.raw())) };
        if p.is_null() {
            return "PSTATE_UNKNOWN_STATUS";
        }
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("PSTATE_UNKNOWN_STATUS")
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
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.status.name())
        } else {
            write!(f, "{}: {}", self.status.name(), self.detail)
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
        "pstate_t" => "PState",
        "pstate_group_t" => "Group",
        "pstate_dtype_t" => "DType",
        "pstate_reduce_op_t" => "ReduceOp",
        "pstate_group_kind_t" => "GroupKind",
        "pstate_device_t" => "Device",
        "pstate_parallel_config_t" => "ParallelConfig",
        "pstate_tensor_t" => "Tensor",
        "PSTATE_DEVICE_CPU" => "Device::Cpu",
        "PSTATE_DEVICE_CUDA" => "Device::Cuda",
        _ => return c.strip_prefix("pstate_").filter(|rest| !rest.is_empty()).map(str::to_owned),
    };
    Some(fixed.to_owned())
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
    let detail = binding_refusal(detail)
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
            if let Some(name) = (word.starts_with("pstate_") || word.starts_with("PSTATE_DEVICE_")).then(|| rust_name(word)).flatten() {
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
            "all_reduce: tp:0 all_reduce: rank 1 exited; the job cannot continue: call PState::abort"
        );
        assert_eq!(
            rust_names("pstate_init: set pstate_init_params_t.world_size and pstate_init_params_t.rank, or use PSTATE_DEVICE_CPU"),
            "PState::init: set InitOptions::world_size and InitOptions::rank, or use Device::Cpu"
        );
        assert_eq!(
            rust_names("rank 1 exited; the job cannot continue as it is: call pstate_shrink (survivors go on) or pstate_abort; see pstate_live_ranks, pstate_grow"),
            "rank 1 exited; the job cannot continue as it is: call PState::shrink (survivors go on) or PState::abort; see PState::live_ranks, PState::grow"
        );
        assert_eq!(rust_names("params->timeout_ms is negative; libpstate.so; PSTATE_ERR_ABORTED"), "InitOptions::timeout is negative; libpstate.so; PSTATE_ERR_ABORTED");
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
