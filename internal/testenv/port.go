package testenv

import (
	"net"
	"sync"
	"testing"
)

// sharedRedisPort is the machine-wide Redis that other things rely on; no
// helper here may ever hand it out.
const sharedRedisPort = 6379

var (
	portsMu sync.Mutex
	// handedOut remembers every port FreePort returned in this process, so
	// two servers started back to back in one test binary never race for the
	// same port. Other processes can still take a port between FreePort and
	// the server's bind; starters retry on "Address already in use" for that.
	handedOut = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and has
// not been returned before in this process. It is only a hint: the caller
// should be ready to retry if binding it fails.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: no free port on 127.0.0.1: %v", err)
	}
	return port
}

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port == sharedRedisPort || handedOut[port] {
			continue
		}
		handedOut[port] = true
		return port, nil
	}
	if lastErr == nil {
		lastErr = errNoFreshPort
	}
	return 0, lastErr
}
