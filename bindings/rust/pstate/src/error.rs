//! Error: a failed call's status and the text pstate_last_error() gave on the failing thread.
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
            Err(Error::new(s, detail))
        }
    }
}
