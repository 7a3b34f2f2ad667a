package e2e

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestClients runs the TypeScript and Python clients' own test suites
// (clients/typescript/test, clients/python/tests) against a real sluice
// serve on its embedded default: each checks that its table of operations
// is the OpenAPI document the service serves, and walks through tenants,
// rules, keys, checks, holds, peek, reset and the audit log. Node.js and
// python3 are required: the suite fails, not skips, without them, so a
// client cannot rot unnoticed.
func TestClients(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	clients := filepath.Join(filepath.Dir(file), "..", "..", "clients")
	addr := freeAddr(t)
	inst := startServe(t, t.TempDir(), addr, nil, "--addr", addr, "--admin-token", adminToken)
	env := []string{"SLUICE_URL=" + inst.url, "SLUICE_ADMIN_TOKEN=" + adminToken}
	for _, c := range []struct {
		name, dir string
		command   []string
	}{
		{"typescript", "typescript", []string{"node", "--test", "test/"}},
		{"python", "python", []string{"python3", "-m", "unittest", "discover", "-s", "tests", "-t", "."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := exec.LookPath(c.command[0]); err != nil {
				t.Fatalf("the %s client's tests need %s on PATH: %v", c.name, c.command[0], err)
			}
			cmd := exec.Command(c.command[0], c.command[1:]...)
			cmd.Dir = filepath.Join(clients, c.dir)
			cmd.Env = append(cmd.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.command, err, out)
			}
		})
	}
}
