package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Chromium returns the path of the Chromium binary for browser tests:
// $SLUICE_TEST_CHROMIUM if set, else chromium on PATH. Like a missing
// redis-server, a missing browser fails the test rather than skipping it
// (scripts/ensure-test-deps.sh installs Debian's chromium).
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SLUICE_TEST_CHROMIUM"); p != "" {
		return p
	}
	// A browser is a server of its own for this purpose: the fast tier
	// needs Go alone.
	skipShort(t, "chromium")
	requireBinary(t, "chromium", "chromium")
	p, _ := exec.LookPath("chromium")
	return p
}
