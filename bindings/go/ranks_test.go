package pstate_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Multi-rank tests launch their own test binary on N ranks:
//
//	pstate run -n N -- <this test binary> -test.run '^TestName$'
//
// with PSTATE_GO_TEST_RANK=TestName set, so in each rank onRanks runs the body instead of
// launching again. The launcher is $PSTATE_CLI, else $PSTATE_BUILD_DIR/pstate, else `pstate`.
const rankEnv = "PSTATE_GO_TEST_RANK"

func launcher(t *testing.T) string {
	if cli := os.Getenv("PSTATE_CLI"); cli != "" {
		return cli
	}
	if dir := os.Getenv("PSTATE_BUILD_DIR"); dir != "" {
		return filepath.Join(dir, "pstate")
	}
	p, err := exec.LookPath("pstate")
	if err != nil {
		t.Fatal("no `pstate` launcher: set PSTATE_CLI or PSTATE_BUILD_DIR, or put pstate on PATH")
	}
	return p
}

// inRank reports whether this process is one rank of the calling test.
func inRank(t *testing.T) bool { return os.Getenv(rankEnv) == t.Name() }

// launch runs the calling test on n ranks and returns the launcher's combined output and error.
func launch(t *testing.T, n int, graceMS int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, launcher(t), "run", "-n", strconv.Itoa(n), "--grace-ms", strconv.Itoa(graceMS),
		"--", os.Args[0], "-test.run", "^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), rankEnv+"="+t.Name())
	if os.Getenv("PSTATE_TIMEOUT_MS") == "" {
		cmd.Env = append(cmd.Env, "PSTATE_TIMEOUT_MS=60000")
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// onRanks runs body in every rank of an n-rank job and requires all of them to pass.
func onRanks(t *testing.T, n int, body func(t *testing.T)) {
	if inRank(t) {
		body(t)
		return
	}
	out, err := launch(t, n, 3000)
	if err != nil || !strings.Contains(out, "--- PASS") {
		t.Fatalf("pstate run -n %d %s: %v\n%s", n, t.Name(), err, out)
	}
}
