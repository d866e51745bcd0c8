package pstate

import (
	"errors"
	"fmt"

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
)

// String is the C name of the status ("PSTATE_ERR_TIMEOUT").
func (s Status) String() string { return capi.Status_string(int(s)) }

// Error is a failed call: its status, the operation and the detail pstate_last_error() gave
// (what failed, where, what to do). Compare with the sentinels: errors.Is(err, pstate.ErrTimeout).
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
)

// wrap turns the raw layer's error (a *capi.StatusError with the C detail) into an *Error.
func wrap(err error, op string) error {
	if err == nil {
		return nil
	}
	var se *capi.StatusError
	if errors.As(err, &se) {
		return &Error{Status: Status(se.Status), Op: op, Detail: se.Message}
	}
	return &Error{Status: StatusInternal, Op: op, Detail: err.Error()}
}

// invalid is an INVALID_ARGUMENT the binding finds before calling C.
func invalid(op, format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Detail: fmt.Sprintf(format, args...)}
}

// badState is an INVALID_STATE the binding finds before calling C.
func badState(op, format string, args ...any) error {
	return &Error{Status: StatusInvalidState, Op: op, Detail: fmt.Sprintf(format, args...)}
}
