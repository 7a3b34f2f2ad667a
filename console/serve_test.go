package console_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/sluicelabs/sluice/console"
	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestServeOnAListenerOfItsOwn: Serve answers the console's pages on its
// address, sends / to the console, and stops when told.
func TestServeOnAListenerOfItsOwn(t *testing.T) {
	var opts console.Options
	newStackWith(t, false, func(o *console.Options) { opts = *o })
	c, err := console.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	stop, err := c.Serve(addr, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != console.Prefix {
		t.Fatalf("GET /: %d to %q, want 303 to %s", resp.StatusCode, resp.Header.Get("Location"), console.Prefix)
	}
	if _, err := c.Serve(addr, nil, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("a second Serve on the same address succeeded")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Error("the listener still answers after stop")
	}
}
