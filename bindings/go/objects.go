package pstate

// Object frames: the bytes BroadcastValue, AllGatherValue and SendValue/RecvValue hand to the C
// object calls.
//
// Every rank of an object call must make the C call, or the others stay in it and take the
// next call's payload for this one (every later call shifted by one). So a sender that cannot
// gob-encode its value still sends: a refusal frame with the reason, then returns its own
// encoding error; each receiver finds the refusal and returns an error wrapping ErrRefused at
// once. Bytes that are not a frame (a raw BroadcastObject, another program) are an error
// wrapping ErrNotAFrame; they are never handed to gob.
//
// A frame (the same in the Python binding, whose objects are pickles):
//
//	"PSOB"  version (1 byte, = 1)  kind (1 byte)  body
//	kind 'g': body is gob (this binding)    kind 'p': body is a pickle (the Python binding)
//	kind 'r': a refusal; body is the sender's reason, UTF-8 (at most maxReason bytes)
//
// A reader refuses a version it does not know instead of guessing at its layout.
// BroadcastObject/AllGatherObject/SendObject/RecvObject move raw bytes and do not frame.

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"sort"
	"strings"
)

const (
	frameMagic   = "PSOB"
	frameVersion = 1
	frameHeader  = len(frameMagic) + 2
	kindGob      = 'g'
	kindPickle   = 'p'
	kindRefusal  = 'r'
	maxReason    = 1024
)

// ErrRefused is wrapped by the error a receiver of a value operation returns when a sender could
// not encode its value and sent a refusal instead (errors.Is(err, pstate.ErrRefused)); the
// *RefusedError in the chain (errors.As) carries the sender's group rank and reason. The error
// is also an ErrInvalidArgument.
var ErrRefused = errors.New("pstate: the sender could not encode its value and sent a refusal")

// ErrNotAFrame is wrapped by the error a receiver returns for bytes that are not an object frame
// it reads (raw bytes, a newer frame version, another binding's encoding). Also an
// ErrInvalidArgument.
var ErrNotAFrame = errors.New("pstate: not a pstate object frame")

// RefusedError: group ranks that could not encode their values (rank -> reason). Rank is the
// first of them; for one sender it is the only one.
type RefusedError struct {
	Rank    int
	Reason  string
	Reasons map[int]string
}

func (e *RefusedError) Error() string {
	if len(e.Reasons) <= 1 {
		return fmt.Sprintf("group rank %d could not encode its value and sent a refusal instead: %s", e.Rank, e.Reason)
	}
	ranks := make([]int, 0, len(e.Reasons))
	for r := range e.Reasons {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprintf("rank %d: %s", r, e.Reasons[r])
	}
	return fmt.Sprintf("group ranks %v could not encode their values and sent refusals instead: %s", ranks, strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func frameHead(kind byte) []byte { return append([]byte(frameMagic), frameVersion, kind) }

// encodeFrame is v as a gob frame, or, when gob cannot encode it, a refusal frame and the
// sender's own error (an ErrInvalidArgument wrapping gob's error).
func encodeFrame[T any](v T, op string) (frame []byte, failure error) {
	buf := bytes.NewBuffer(frameHead(kindGob))
	err := gob.NewEncoder(buf).Encode(&v)
	if err == nil {
		return buf.Bytes(), nil
	}
	return refusalFrame("Go binding: gob: " + err.Error()), &Error{Status: StatusInvalidArgument, Op: op, Detail: "gob: " + err.Error(), Cause: err}
}

// refusalFrame is the refusal of a reason cut to maxReason bytes.
func refusalFrame(reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason-3] + "..."
	}
	return append(frameHead(kindRefusal), reason...)
}

// parseFrame returns the kind and body of a frame from group rank rank.
func parseFrame(data []byte, rank int, op string) (kind byte, body []byte, err error) {
	if len(data) < frameHeader || string(data[:len(frameMagic)]) != frameMagic {
		head := data
		if len(head) > 8 {
			head = head[:8]
		}
		return 0, nil, notAFrame(op, "group rank %d sent %d bytes that are not a pstate object frame (first bytes %q; expected %q): "+
			"a raw object call or another program on the other side? Use the Value operations on every rank", rank, len(data), head, frameMagic)
	}
	if v := data[len(frameMagic)]; v != frameVersion {
		return 0, nil, notAFrame(op, "group rank %d sent an object frame of version %d; this binding reads version %d "+
			"(is the sender a different pstate release?)", rank, v, frameVersion)
	}
	return data[frameHeader-1], data[frameHeader:], nil
}

func notAFrame(op, format string, args ...any) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Detail: fmt.Sprintf(format, args...), Cause: ErrNotAFrame}
}

func refused(op string, reasons map[int]string) error {
	first := -1
	for r := range reasons {
		if first < 0 || r < first {
			first = r
		}
	}
	re := &RefusedError{Rank: first, Reason: reasons[first], Reasons: reasons}
	return &Error{Status: StatusInvalidArgument, Op: op, Detail: re.Error(), Cause: re}
}

// decodeFrame decodes a parsed gob frame into out.
func decodeFrame[T any](kind byte, body []byte, rank int, op string, out *T) error {
	switch kind {
	case kindGob:
		if err := gob.NewDecoder(bytes.NewReader(body)).Decode(out); err != nil {
			return &Error{Status: StatusInvalidArgument, Op: op, Detail: fmt.Sprintf("gob: group rank %d: %v", rank, err), Cause: err}
		}
		return nil
	case kindRefusal:
		return refused(op, map[int]string{rank: string(body)})
	case kindPickle:
		return notAFrame(op, "group rank %d sent a pickle (Python binding); this binding reads gob", rank)
	}
	return notAFrame(op, "group rank %d sent an object of unknown kind %q; this binding reads gob", rank, kind)
}

func decodeValue[T any](data []byte, rank int, op string) (T, error) {
	var out T
	kind, body, err := parseFrame(data, rank, op)
	if err == nil {
		err = decodeFrame(kind, body, rank, op, &out)
	}
	return out, err
}

// BroadcastValue sends v of group rank src to every rank, encoded with encoding/gob (any value
// gob can encode); other ranks' v is ignored. A v that src cannot encode returns gob's error
// (ErrInvalidArgument) on src and, on every other rank, an error wrapping ErrRefused with src's
// reason; the group stays in step.
func BroadcastValue[T any](g *Group, v T, src int) (T, error) {
	op := "BroadcastValue on " + g.Name()
	if g.RankInGroup() != src {
		got, err := g.BroadcastObject(nil, src)
		if err != nil {
			var zero T
			return zero, err
		}
		return decodeValue[T](got, src, op)
	}
	frame, failure := encodeFrame(v, op)
	if _, err := g.BroadcastObject(frame, src); err != nil && failure == nil {
		return v, err
	}
	return v, failure
}

// AllGatherValue returns every rank's v (gob-encoded), in group-rank order. A rank that cannot
// encode its v returns gob's error (after taking part in the call); every other rank returns an
// error wrapping ErrRefused that names the ranks that refused.
func AllGatherValue[T any](g *Group, v T) ([]T, error) {
	op := "AllGatherValue on " + g.Name()
	frame, failure := encodeFrame(v, op)
	parts, err := g.AllGatherObject(frame)
	if failure != nil {
		return nil, failure
	}
	if err != nil {
		return nil, err
	}
	kinds, bodies := make([]byte, len(parts)), make([][]byte, len(parts))
	reasons := map[int]string{}
	for i, p := range parts {
		if kinds[i], bodies[i], err = parseFrame(p, i, op); err != nil {
			return nil, err
		}
		if kinds[i] == kindRefusal {
			reasons[i] = string(bodies[i])
		}
	}
	if len(reasons) > 0 {
		return nil, refused(op, reasons)
	}
	out := make([]T, len(parts))
	for i := range parts {
		if err := decodeFrame(kinds[i], bodies[i], i, op, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SendValue sends v (gob-encoded) to group rank dst, which receives it with RecvValue. A v that
// cannot be encoded returns gob's error here and an error wrapping ErrRefused in dst's RecvValue.
func SendValue[T any](g *Group, v T, dst int) error {
	frame, failure := encodeFrame(v, "SendValue on "+g.Name())
	if err := g.SendObject(frame, dst); err != nil && failure == nil {
		return err
	}
	return failure
}

// RecvValue receives the next value SendValue sent from group rank src.
func RecvValue[T any](g *Group, src int) (T, error) {
	got, err := g.RecvObject(src)
	if err != nil {
		var zero T
		return zero, err
	}
	return decodeValue[T](got, src, "RecvValue on "+g.Name())
}
