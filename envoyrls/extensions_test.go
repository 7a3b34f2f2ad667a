package envoyrls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicelabs/sluice/envoyrls"
)

// configDir writes one domain file per argument into a fresh directory.
func configDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, f := range files {
		write(t, dir, "domain"+string(rune('a'+i))+".yaml", f)
	}
	return dir
}

func TestTokenBucketExtension(t *testing.T) {
	dir := configDir(t, `
domain: tb
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1
      algorithm: token_bucket
      burst: 3
`)
	srv, clock := memoryServer(t, dir, envoyrls.Options{})
	c := serve(t, srv)
	codes := func(n int) string {
		var b strings.Builder
		for range n {
			if call(t, c, "tb", desc("user", "u")).OverallCode == ok {
				b.WriteByte('+')
			} else {
				b.WriteByte('-')
			}
		}
		return b.String()
	}
	if got := codes(4); got != "+++-" {
		t.Fatalf("burst of 3: %s, want +++-", got)
	}
	clock.Advance(time.Second)
	if got := codes(2); got != "+-" {
		t.Fatalf("one second later: %s, want +-", got)
	}
}

func TestSlidingWindowExtension(t *testing.T) {
	dir := configDir(t, `
domain: sw
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 10
      algorithm: sliding_window
  - key: fixed
    rate_limit:
      unit: minute
      requests_per_unit: 10
`)
	srv, clock := memoryServer(t, dir, envoyrls.Options{})
	c := serve(t, srv)
	// 10 requests at the end of one minute, then 10 more just after the
	// boundary: a fixed window lets all through (the boundary burst), the
	// sliding window does not.
	clock.Advance(59 * time.Second)
	for range 10 {
		call(t, c, "sw", desc("user", "u"), desc("fixed", "u"))
	}
	clock.Advance(2 * time.Second)
	var slidingOK, fixedOK int
	for range 10 {
		r := call(t, c, "sw", desc("user", "u"), desc("fixed", "u"))
		if r.Statuses[0].Code == ok {
			slidingOK++
		}
		if r.Statuses[1].Code == ok {
			fixedOK++
		}
	}
	if fixedOK != 10 {
		t.Errorf("fixed window admitted %d after the boundary, want 10", fixedOK)
	}
	// 1s into the new minute, the previous one still weighs 59/60 of 10.
	if slidingOK != 0 {
		t.Errorf("sliding window admitted %d just after the boundary, want 0", slidingOK)
	}
}

func TestAllOrNothing(t *testing.T) {
	const rules = `
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	tests := []struct {
		name          string
		allOrNothing  bool
		wantUserAfter uint32 // remaining for the user after 3 requests
	}{
		{"independent_by_default_consumes_the_allowing_descriptor", false, 2},
		{"all_or_nothing_consumes_nothing_on_deny", true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head := "domain: aon\n"
			if tt.allOrNothing {
				head += "all_or_nothing: true\n"
			}
			srv, _ := memoryServer(t, configDir(t, head+rules), envoyrls.Options{})
			c := serve(t, srv)
			var last *rlspb.RateLimitResponse
			for i := range 3 {
				last = call(t, c, "aon", desc("user", "u1"), desc("tenant", "t1"))
				want := ok
				if i == 2 {
					want = over
				}
				if last.OverallCode != want {
					t.Fatalf("call %d: %v, want %v", i+1, last.OverallCode, want)
				}
			}
			if last.Statuses[0].Code != ok || last.Statuses[1].Code != over {
				t.Fatalf("statuses of the denied call: %v, %v; want OK, OVER_LIMIT", last.Statuses[0].Code, last.Statuses[1].Code)
			}
			peek := call(t, c, "aon", withHits(desc("user", "u1"), 0))
			if got := peek.Statuses[0].LimitRemaining; got != tt.wantUserAfter {
				t.Fatalf("user remaining = %d, want %d", got, tt.wantUserAfter)
			}
		})
	}
}

func TestAllOrNothingCountersAreSharedAcrossCombinations(t *testing.T) {
	srv, _ := memoryServer(t, configDir(t, `
domain: aon
all_or_nothing: true
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 100}
`), envoyrls.Options{})
	c := serve(t, srv)
	// The user's counter is the same whatever IP comes with it.
	for i, ipv := range []string{"a", "b", "c", "d"} {
		r := call(t, c, "aon", desc("user", "u"), desc("ip", ipv))
		if want := i < 3; (r.OverallCode == ok) != want {
			t.Fatalf("call %d: %v", i+1, r.OverallCode)
		}
	}
}

// TestBlockedValue checks a requests_per_unit: 0 rule (the README's blocked
// IP) in both modes: it denies any hit and answers a look with OK and none
// remaining, never an error, which Envoy would let through by default. In an
// all-or-nothing domain the block denies the whole request without
// consuming the other descriptors' quota.
func TestBlockedValue(t *testing.T) {
	const rules = `
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: ip
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	for _, aon := range []bool{false, true} {
		t.Run(fmt.Sprintf("all_or_nothing=%v", aon), func(t *testing.T) {
			head := "domain: blocked\n"
			if aon {
				head += "all_or_nothing: true\n"
			}
			srv, _ := memoryServer(t, configDir(t, head+rules), envoyrls.Options{})
			c := serve(t, srv)
			ask := func(descs ...*ratelimitv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
				t.Helper()
				r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "blocked", Descriptors: descs})
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return r
			}
			if r := ask(desc("ip", "50.0.0.5")); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
				t.Fatalf("blocked IP alone: %v", r)
			}
			r := ask(desc("ip", "50.0.0.5"), desc("user", "u"))
			if r.OverallCode != over || r.Statuses[0].Code != over || r.Statuses[1].Code != ok {
				t.Fatalf("blocked IP with a user: %v", r)
			}
			wantUser := uint32(4) // checked on its own: counted
			if aon {
				wantUser = 5 // denied as a whole: nothing consumed
			}
			if got := ask(withHits(desc("user", "u"), 0)).Statuses[0].LimitRemaining; got != wantUser {
				t.Errorf("user remaining = %d, want %d", got, wantUser)
			}
			peek := ask(withHits(desc("ip", "50.0.0.5"), 0))
			if st := peek.Statuses[0]; peek.OverallCode != ok || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 0 {
				t.Fatalf("a look at the blocked IP: %v", peek)
			}
			if r := ask(desc("ip", "10.0.0.1"), desc("user", "v")); r.OverallCode != ok {
				t.Fatalf("another IP: %v", r)
			}
		})
	}
}

func TestResponseHeadersIETF(t *testing.T) {
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{ResponseHeaders: true, HeaderStyle: envoyrls.HeaderStyleIETF})
	c := serve(t, srv)
	headers := func(r *rlspb.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	r := call(t, c, "rl", desc("source_cluster", "proxy", "destination_cluster", "foo"), desc("destination_cluster", "mock"))
	h := headers(r)
	if h["x-ratelimit-limit"] != "2" || h["x-ratelimit-remaining"] != "1" {
		t.Fatalf("headers of the most restrictive descriptor: %v", h)
	}
	if h["ratelimit-policy"] == "" || h["ratelimit"] == "" || h["retry-after"] != "" {
		t.Fatalf("IETF headers on an allow: %v", h)
	}
	call(t, c, "rl", desc("destination_cluster", "mock"))
	h = headers(call(t, c, "rl", desc("destination_cluster", "mock")))
	if h["x-ratelimit-remaining"] != "0" || h["retry-after"] == "" {
		t.Fatalf("headers on a deny: %v", h)
	}
	if r := call(t, c, "mongo_cps", desc("database", "none")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers without a limit: %v", r.ResponseHeadersToAdd)
	}
}

func TestJSONEndpoint(t *testing.T) {
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{})
	ts := httptest.NewServer(srv.JSONHandler())
	t.Cleanup(ts.Close)
	post := func(body string) (int, []byte) {
		resp, err := http.Post(ts.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	req, _ := protojson.Marshal(&rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("destination_cluster", "mock")}})
	for i, want := range []int{200, 200, 429} {
		code, body := post(string(req))
		if code != want {
			t.Fatalf("call %d: %d %s, want %d", i+1, code, body, want)
		}
		var resp rlspb.RateLimitResponse
		if err := protojson.Unmarshal(body, &resp); err != nil {
			t.Fatalf("response is not a RateLimitResponse: %v: %s", err, body)
		}
		if !strings.Contains(string(body), `"limitRemaining":`) {
			t.Fatalf("call %d: limitRemaining omitted: %s", i+1, body)
		}
		if (resp.OverallCode == over) != (want == 429) {
			t.Fatalf("call %d: overall %v with status %d", i+1, resp.OverallCode, code)
		}
	}
	// The same JSON as envoyproxy/ratelimit's documentation uses.
	code, _ := post(`{"domain": "rl", "descriptors": [{"entries": [{"key": "destination_cluster", "value": "other"}]}]}`)
	if code != 200 {
		t.Fatalf("documented form: %d", code)
	}
	for _, bad := range []string{`{`, `{"domain": "rl", "descriptors": [{"entries": [{"kee": "x"}]}]}`, `{"descriptors": [{"entries": [{"key": "x"}]}]}`} {
		code, body := post(bad)
		var e struct {
			Error struct{ Code, Message string }
		}
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want 400 with an error message", bad, code, body)
		}
	}
	resp, err := http.Post(ts.URL+"/json", "application/json", bytes.NewReader(make([]byte, 70<<10)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("70 KiB body: %d, want 413", resp.StatusCode)
	}
}

func TestInvalidRequests(t *testing.T) {
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{})
	c := serve(t, srv)
	for name, req := range map[string]*rlspb.RateLimitRequest{
		"empty_domain":   {Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}},
		"no_descriptors": {Domain: "rl"},
	} {
		if _, err := c.ShouldRateLimit(context.Background(), req); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLimitOverrideFromEnvoy(t *testing.T) {
	srv, _ := memoryServer(t, "testdata/readme", envoyrls.Options{})
	c := serve(t, srv)
	withOverride := func(v string) *ratelimitv3.RateLimitDescriptor {
		d := desc("anything", v)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	for i, want := range []rlspb.RateLimitResponse_Code{ok, ok, over} {
		r := call(t, c, "rl", withOverride("a"))
		if r.OverallCode != want {
			t.Fatalf("call %d: %v, want %v", i+1, r.OverallCode, want)
		}
		if cl := r.Statuses[0].CurrentLimit; cl.GetRequestsPerUnit() != 2 || cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR {
			t.Fatalf("current_limit = %v", cl)
		}
	}
	// Another descriptor value has its own counter.
	if r := call(t, c, "rl", withOverride("b")); r.OverallCode != ok {
		t.Fatalf("other value: %v", r.OverallCode)
	}
	// An unknown domain ignores overrides, as envoyproxy/ratelimit does.
	if r := call(t, c, "nobody", withOverride("a"), withOverride("a"), withOverride("a")); r.OverallCode != ok {
		t.Fatalf("unknown domain: %v", r.OverallCode)
	}
}

// TestSeveralLimitsOnOneDescriptor: rate_limits (a Sluice extension, asked
// of envoyproxy/ratelimit in its issues 107, 262, 390 and 693) gives one
// descriptor several limits, checked together: a request passes only if
// every one allows, a deny by one consumes nothing in the others, and the
// status reports the limit that denied (or, when allowed, the one closest
// to denying). In an all_or_nothing domain too.
func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	const rules = `
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 3, name: user_limits}
      - {unit: minute, requests_per_unit: 5}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	for _, head := range []string{"domain: many\n", "domain: many\nall_or_nothing: true\n"} {
		t.Run(strings.TrimSpace(strings.ReplaceAll(head, "\n", " ")), func(t *testing.T) {
			srv, clock := memoryServer(t, configDir(t, head+rules), envoyrls.Options{})
			c := serve(t, srv)
			req := func() *rlspb.RateLimitResponse { return call(t, c, "many", desc("user", "u1"), desc("tenant", "t1")) }
			// 3 in the first second: the per-second limit is the closest.
			for i := range 3 {
				r := req()
				if r.OverallCode != ok {
					t.Fatalf("request %d: %v", i+1, r.OverallCode)
				}
				if cl := r.Statuses[0].CurrentLimit; i == 2 && (cl.Unit != rlspb.RateLimitResponse_RateLimit_SECOND || r.Statuses[0].LimitRemaining != 0) {
					t.Fatalf("request 3 reports %v with %d remaining, want the per-second limit with 0", cl, r.Statuses[0].LimitRemaining)
				}
			}
			r := req()
			if r.OverallCode != over || r.Statuses[0].CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_SECOND || r.Statuses[0].CurrentLimit.Name != "user_limits" {
				t.Fatalf("4th in the second: %v, status %v; want OVER_LIMIT by the per-second limit user_limits", r.OverallCode, r.Statuses[0])
			}
			// The deny consumed nothing in the per-minute limit: 2 more fit
			// in the next second, then the minute's 5 are spent.
			clock.Advance(time.Second)
			for i := range 2 {
				if r := req(); r.OverallCode != ok {
					t.Fatalf("request %d of the second second: %v (the denied one was counted in the minute)", i+1, r.OverallCode)
				}
			}
			r = req()
			if r.OverallCode != over || r.Statuses[0].CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_MINUTE {
				t.Fatalf("6th in the minute: %v, status %v; want OVER_LIMIT by the per-minute limit", r.OverallCode, r.Statuses[0])
			}
			// A cost no limit of them can hold is denied without the store.
			if r := call(t, c, "many", withHits(desc("user", "u2"), 4)); r.OverallCode != over || r.Statuses[0].CurrentLimit.Unit != rlspb.RateLimitResponse_RateLimit_SECOND {
				t.Fatalf("hits 4 against 3 per second: %v, status %v", r.OverallCode, r.Statuses[0])
			}
		})
	}
}

// TestSeveralLimitsAreCheckedInTheConfig: rate_limits is refused, with a
// sentence, beside rate_limit, empty, with an unlimited entry or one
// without requests_per_unit, with name or failure_mode past the first entry,
// or with two entries counting the same window.
func TestSeveralLimitsAreCheckedInTheConfig(t *testing.T) {
	for _, tc := range []struct{ limits, want string }{
		{"rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: minute, requests_per_unit: 2}]", "rate_limit and rate_limits both"},
		{"rate_limits: []", "rate_limits is empty"},
		{"rate_limits: [{unit: second, requests_per_unit: 1}, {unlimited: true}]", "entry 2 is unlimited"},
		{"rate_limits: [{unit: second, requests_per_unit: 1}, {unit: minute}]", "entry 2 has no requests_per_unit"},
		{"rate_limits: [{unit: second, requests_per_unit: 1}, {unit: minute, requests_per_unit: 2, name: x}]", "belong to the first entry"},
		{"rate_limits: [{unit: second, requests_per_unit: 1}, {unit: second, requests_per_unit: 2, algorithm: token_bucket}]", "counts per second like another"},
		{"rate_limits: [{unit: second, requests_per_unit: 1}, {unit: fortnight, requests_per_unit: 2}]", "entry 2: rate_limit unit"},
	} {
		_, err := envoyrls.LoadDir(configDir(t, "domain: d\ndescriptors:\n  - key: k\n    "+tc.limits+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one saying %q", tc.limits, err, tc.want)
		}
	}
	// Two windows of one unit differ by unit_multiplier.
	if _, err := envoyrls.LoadDir(configDir(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 1}, {unit: second, unit_multiplier: 10, requests_per_unit: 5}]\n")); err != nil {
		t.Errorf("1 per second and 5 per 10 seconds: %v", err)
	}
}
