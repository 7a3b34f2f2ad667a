// Package testenv starts real, private servers for tests: a standalone
// redis-server, a three-master Redis Cluster, and a fresh PostgreSQL
// database.
//
// Every server belongs to exactly one test. Redis processes are started from
// the redis-server binary on PATH, on free loopback ports, with their data and
// logs in the test's temporary directory, and are killed (by PID) when the
// test ends; the machine's shared Redis on port 6379 is never used. PostgreSQL
// is the one exception to "start it yourself": a server must already be
// running (see SLUICE_TEST_POSTGRES), and each test gets its own database on
// it, created on demand and dropped afterwards.
//
// A missing binary or an unreachable server fails the test rather than
// skipping it: a suite that silently skips its integration tests reports green
// while testing nothing. The one exception is go test -short, the fast tier
// (make test-short): there every helper that needs a server skips its test.
//
// The helpers call t.Fatalf, so call them from the test's own goroutine. The
// package is written for Linux (it relies on SIGSTOP/SIGCONT and, on Linux,
// on the parent-death signal to reap servers if the test binary crashes).
package testenv
