package pstate

import (
	"errors"
	"strings"
	"testing"
)

func TestAGobFrameRoundTripsAndStartsWithTheVersionedHeader(t *testing.T) {
	frame, failure := encodeFrame(map[string][]int{"ids": {1, 2, 3}}, "test")
	if failure != nil || string(frame[:frameHeader]) != "PSOB\x01g" {
		t.Fatalf("frame %q, err %v", frame, failure)
	}
	got, err := decodeValue[map[string][]int](frame, 0, "test")
	if err != nil || len(got["ids"]) != 3 || got["ids"][2] != 3 {
		t.Fatalf("decoded %v, err %v", got, err)
	}
}

func TestAnUnencodableValueGivesTheSenderGobsErrorAndARefusalFrame(t *testing.T) {
	frame, failure := encodeFrame(make(chan int), "BroadcastValue on tp:0")
	if !errors.Is(failure, ErrInvalidArgument) || errors.Is(failure, ErrRefused) || !strings.Contains(failure.Error(), "chan int") {
		t.Fatalf("sender's error %v", failure)
	}
	if string(frame[:frameHeader]) != "PSOB\x01r" {
		t.Fatalf("refusal frame %q", frame)
	}
	_, err := decodeValue[chan int](frame, 2, "BroadcastValue on tp:0")
	var re *RefusedError
	if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &re) || re.Rank != 2 ||
		!strings.Contains(re.Reason, "Go binding: gob") || !strings.Contains(err.Error(), "group rank 2 could not encode") {
		t.Fatalf("receiver's error %v (%+v)", err, re)
	}
}

func TestALongReasonIsCutSoTheRefusalStaysSmall(t *testing.T) {
	frame := refusalFrame(strings.Repeat("k", 5000))
	if len(frame) != frameHeader+maxReason || !strings.HasSuffix(string(frame), "...") {
		t.Fatalf("refusal of %d bytes", len(frame))
	}
}

func TestBytesThatAreNotAGobFrameWrapErrNotAFrame(t *testing.T) {
	for raw, text := range map[string]string{
		"":                  "not a pstate object frame",
		"PSO":               "not a pstate object frame",
		"PSOB\x01":          "not a pstate object frame",
		"garbage bytes":     "not a pstate object frame",
		"\x0e\xff\x81\x03":  "not a pstate object frame", // unframed gob
		"PSOB\x02g\x00":     "version 2",
		"PSOB\x01p\x80\x05": "pickle (Python binding)",
		"PSOB\x01Z":         "unknown kind",
	} {
		_, err := decodeValue[int]([]byte(raw), 1, "RecvValue on world:0")
		var pe *Error
		if !errors.Is(err, ErrNotAFrame) || !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &pe) || !strings.Contains(pe.Detail, text) {
			t.Fatalf("%q: err %v, want %q", raw, err, text)
		}
	}
	// a frame with a corrupt gob body is gob's error, not a crash
	if _, err := decodeValue[int]([]byte("PSOB\x01g\xff\xff\xff"), 1, "x"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("corrupt body: %v", err)
	}
}

func TestRefusalsOfSeveralRanksNameAllOfThem(t *testing.T) {
	err := refused("AllGatherValue on world:0", map[int]string{2: "b", 1: "a"})
	var re *RefusedError
	if !errors.As(err, &re) || re.Rank != 1 || re.Reason != "a" || !strings.Contains(err.Error(), "group ranks [1 2]") ||
		!strings.Contains(err.Error(), "rank 2: b") {
		t.Fatalf("%v", err)
	}
}
