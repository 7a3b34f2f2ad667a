package main

import (
	"slices"
	"strings"
	"testing"
)

// TestEnvoyModeArgs: the binary runs in ENV mode when started under the
// name ratelimit (whatever follows), or with envoyproxy/ratelimit's
// variables and no subcommand; otherwise the command line is left as is.
func TestEnvoyModeArgs(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	none := env(nil)
	envs := env(map[string]string{"REDIS_URL": "redis:6379", "RUNTIME_ROOT": "/data"})
	generic := env(map[string]string{"PORT": "8080", "LOG_LEVEL": "debug"})
	for _, tc := range []struct {
		args   []string
		lookup func(string) (string, bool)
		want   []string
	}{
		{[]string{"/bin/ratelimit"}, none, []string{"/bin/ratelimit", "serve", "--envoy-mode"}},
		{[]string{"/bin/ratelimit", "--log-level", "debug"}, none, []string{"/bin/ratelimit", "serve", "--envoy-mode", "--log-level", "debug"}},
		{[]string{"ratelimit"}, envs, []string{"ratelimit", "serve", "--envoy-mode"}},
		{[]string{"/usr/local/bin/sluice"}, envs, []string{"/usr/local/bin/sluice", "serve", "--envoy-mode"}},
		// A subcommand, or no ENV variables, is Sluice as ever.
		{[]string{"/usr/local/bin/sluice", "serve"}, envs, []string{"/usr/local/bin/sluice", "serve"}},
		{[]string{"/usr/local/bin/sluice"}, none, []string{"/usr/local/bin/sluice"}},
		{[]string{"/usr/local/bin/sluice"}, generic, []string{"/usr/local/bin/sluice"}},
		{[]string{"/usr/local/bin/ratelimiter"}, none, []string{"/usr/local/bin/ratelimiter"}},
	} {
		if got := envoyModeArgs(tc.args, tc.lookup); !slices.Equal(got, tc.want) {
			t.Errorf("envoyModeArgs(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestEnvoyModeRefusesSluiceAPIFlags: a flag of Sluice's own API in ENV
// mode is a mistake said in words, before anything starts.
func TestEnvoyModeRefusesSluiceAPIFlags(t *testing.T) {
	t.Setenv("RUNTIME_ROOT", t.TempDir())
	for _, flag := range []string{"--database=sqlite://x.db", "--admin-token=0123456789abcdef0123456789abcdef", "--console=false"} {
		cmd := newServeCmd()
		cmd.SetArgs([]string{"--envoy-mode", flag})
		err := cmd.Execute()
		name := strings.TrimPrefix(strings.SplitN(flag, "=", 2)[0], "--")
		if err == nil || !strings.Contains(err.Error(), "--"+name+" configures Sluice's own API") {
			t.Errorf("%s: err %v, want one saying it configures Sluice's own API", flag, err)
		}
	}
}
