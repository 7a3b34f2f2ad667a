package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice/internal/testenv"
)

// TestSideBySideWithEnvoyRatelimit starts envoyproxy/ratelimit's binary
// (SLUICE_COMPARE_RATELIMIT) and this one, both as /bin/ratelimit with the
// same ENV variables, each on its own redis-server, over each of the
// configurations ENV's repository ships (SLUICE_ENV_REPO: its examples and
// test configurations), and sends both the same ShouldRateLimit requests,
// generated from each configuration: every descriptor of it (a wildcard
// given two values it matches), with hits_addend unset, 0, 1 and large
// enough to cross the limit, in the request and in the descriptor, and all
// of a domain's descriptors in one request (replaces, quota mode); and a
// descriptor of no rule, a domain of none; with RESPONSE_DYNAMIC_METADATA,
// and again with LIMIT_RESPONSE_HEADERS_ENABLED. Every status must agree:
// code, limit, remaining, dynamic metadata, response headers, and
// duration_until_reset within a second. Skipped without the two variables.
func TestSideBySideWithEnvoyRatelimit(t *testing.T) {
	envBinary, envRepo := os.Getenv("SLUICE_COMPARE_RATELIMIT"), os.Getenv("SLUICE_ENV_REPO")
	if envBinary == "" || envRepo == "" {
		t.Skip("set SLUICE_COMPARE_RATELIMIT to envoyproxy/ratelimit's binary and SLUICE_ENV_REPO to its repository")
	}
	sets := map[string][]string{
		"examples":    glob(t, filepath.Join(envRepo, "examples/ratelimit/config/*.yaml")),
		"integration": glob(t, filepath.Join(envRepo, "test/integration/runtime/current/ratelimit/config/*.yaml")),
	}
	for _, name := range []string{"basic_config", "shadowmode_config", "share_threshold", "wildcard", "metadata"} {
		sets[name] = []string{filepath.Join(envRepo, "test/config", name+".yaml")}
	}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	// Two sets of variables: the answers alone, and with ENV's response
	// headers.
	variables := map[string][]string{
		"plain":   nil,
		"headers": {"LIMIT_RESPONSE_HEADERS_ENABLED=true"},
	}
	total, agreed := 0, 0
	for _, vars := range []string{"plain", "headers"} {
		for _, name := range names {
			t.Run(vars+"/"+name, func(t *testing.T) {
				n, ok := compareOn(t, envBinary, sets[name], variables[vars]...)
				total, agreed = total+n, agreed+ok
				t.Logf("%s, %s: %d/%d requests agree", vars, name, ok, n)
			})
		}
	}
	t.Logf("in all: %d/%d requests agree", agreed, total)
}

func glob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	mustRun(t, err)
	if len(m) == 0 {
		t.Fatalf("no file matches %s", pattern)
	}
	return m
}

// compareOn runs both services over the files and compares their answers
// to the generated requests; it returns how many requests it sent and how
// many got the same answer.
func compareOn(t *testing.T, envBinary string, files []string, env ...string) (total, agreed int) {
	clients := map[string]rlspb.RateLimitServiceClient{}
	var domains []sbsDomain
	for _, which := range []string{"env", "sluice"} {
		base := t.TempDir()
		config := filepath.Join(base, "runtime/ratelimit/config")
		mustRun(t, os.MkdirAll(config, 0o755))
		for _, f := range files {
			copyFile(t, f, filepath.Join(config, filepath.Base(f)), 0o644)
		}
		bin := copyRatelimit(t, base)
		if which == "env" {
			copyFile(t, envBinary, bin, 0o755)
		}
		redis := testenv.Redis(t)
		p := startRatelimit(t, bin, base, filepath.Join(base, "runtime"), false, append([]string{
			"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr, "RUNTIME_WATCH_ROOT=false",
			"RESPONSE_DYNAMIC_METADATA=true"}, env...)...)
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		mustRun(t, err)
		t.Cleanup(func() { conn.Close() })
		clients[which] = rlspb.NewRateLimitServiceClient(conn)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		mustRun(t, err)
		var d sbsDomain
		mustRun(t, yaml.Unmarshal(raw, &d))
		domains = append(domains, d)
	}
	ask := func(c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return c.ShouldRateLimit(ctx, req)
	}
	withHeaders := 0
	for _, req := range generateRequests(domains) {
		total++
		start := time.Now()
		envResp, envErr := ask(clients["env"], req)
		slResp, slErr := ask(clients["sluice"], req)
		if len(envResp.GetResponseHeadersToAdd()) > 0 {
			withHeaders++
		}
		if diff := compareResponses(envResp, envErr, slResp, slErr); diff != "" {
			switch {
			case start.Unix() != time.Now().Unix():
				// Both count in the wall clock's windows: a window that
				// ended between the two calls is not a disagreement.
				t.Logf("a second ended between the two calls of %v: %s", req, diff)
			default:
				t.Errorf("%v:\n%s", req, diff)
			}
			continue
		}
		agreed++
	}
	if withHeaders > 0 {
		t.Logf("%d answers carried response headers", withHeaders)
	}
	return total, agreed
}

type sbsDomain struct {
	Domain      string          `yaml:"domain"`
	Descriptors []sbsDescriptor `yaml:"descriptors"`
}

type sbsDescriptor struct {
	Key         string          `yaml:"key"`
	Value       string          `yaml:"value"`
	RateLimit   *sbsRateLimit   `yaml:"rate_limit"`
	Descriptors []sbsDescriptor `yaml:"descriptors"`
}

type sbsRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
}

// generateRequests are the requests for domains: per descriptor of each
// (its entries from the root, a wildcard's '*' filled two ways), a run of
// hits that crosses its limit, in the request's and the descriptor's
// hits_addend; a request of all of a domain's descriptors, twice; a
// descriptor of no rule; a domain of none.
func generateRequests(domains []sbsDomain) []*rlspb.RateLimitRequest {
	var out []*rlspb.RateLimitRequest
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	for _, d := range domains {
		type path struct {
			entries []*ratelimitv3.RateLimitDescriptor_Entry
			limit   uint32
		}
		var paths []path
		var walk func(prefix []*ratelimitv3.RateLimitDescriptor_Entry, ds []sbsDescriptor)
		walk = func(prefix []*ratelimitv3.RateLimitDescriptor_Entry, ds []sbsDescriptor) {
			for _, yd := range ds {
				values := []string{yd.Value}
				switch {
				case yd.Value == "":
					values = []string{"any1"}
				case strings.Contains(yd.Value, "*"):
					values = []string{strings.ReplaceAll(yd.Value, "*", "x1"), strings.ReplaceAll(yd.Value, "*", "y22")}
				}
				for _, v := range values {
					entries := append(append([]*ratelimitv3.RateLimitDescriptor_Entry{}, prefix...), entry(yd.Key, v))
					limit := uint32(math.MaxUint32)
					if yd.RateLimit != nil && !yd.RateLimit.Unlimited {
						limit = yd.RateLimit.RequestsPerUnit
					}
					paths = append(paths, path{entries, limit})
					walk(entries, yd.Descriptors)
				}
			}
		}
		walk(nil, d.Descriptors)
		var all []*ratelimitv3.RateLimitDescriptor
		for _, p := range paths {
			all = append(all, &ratelimitv3.RateLimitDescriptor{Entries: p.entries})
			// Unset (1), 1, 0, then enough to cross the limit (capped: a
			// limit of millions is crossed by one addend as well).
			big := uint64(p.limit) + 2
			if p.limit == math.MaxUint32 {
				big = 5
			}
			for _, hits := range []*uint64{nil, ptr(1), ptr(0), ptr(big), ptr(0), nil} {
				desc := &ratelimitv3.RateLimitDescriptor{Entries: p.entries}
				req := &rlspb.RateLimitRequest{Domain: d.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc}}
				if hits != nil {
					if *hits%2 == 0 {
						desc.HitsAddend = wrapperspb.UInt64(*hits)
					} else if *hits <= math.MaxUint32 {
						req.HitsAddend = uint32(*hits)
					}
				}
				out = append(out, req)
			}
		}
		for range 2 {
			out = append(out, &rlspb.RateLimitRequest{Domain: d.Domain, Descriptors: all})
		}
		out = append(out, &rlspb.RateLimitRequest{Domain: d.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("no_such_key", "v")}}}})
	}
	out = append(out, &rlspb.RateLimitRequest{Domain: "no-such-domain", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("k", "v")}}}})
	return out
}

func ptr(n uint64) *uint64 { return &n }

// compareResponses says how two answers differ; "" when they agree.
func compareResponses(a *rlspb.RateLimitResponse, aErr error, b *rlspb.RateLimitResponse, bErr error) string {
	if (aErr == nil) != (bErr == nil) {
		return fmt.Sprintf("envoyproxy/ratelimit: %v %v\nsluice: %v %v", a, aErr, b, bErr)
	}
	if aErr != nil {
		return ""
	}
	var diffs []string
	if a.GetOverallCode() != b.GetOverallCode() {
		diffs = append(diffs, fmt.Sprintf("overall %v, sluice %v", a.GetOverallCode(), b.GetOverallCode()))
	}
	if len(a.GetStatuses()) != len(b.GetStatuses()) {
		diffs = append(diffs, fmt.Sprintf("%d statuses, sluice %d", len(a.GetStatuses()), len(b.GetStatuses())))
	} else {
		for i, sa := range a.GetStatuses() {
			sb := b.GetStatuses()[i]
			da, db := sa.GetDurationUntilReset().AsDuration(), sb.GetDurationUntilReset().AsDuration()
			if sa.GetCode() != sb.GetCode() || !proto.Equal(sa.GetCurrentLimit(), sb.GetCurrentLimit()) ||
				sa.GetLimitRemaining() != sb.GetLimitRemaining() || (da-db).Abs() > time.Second {
				diffs = append(diffs, fmt.Sprintf("status %d: %v\n  sluice: %v", i, sa, sb))
			}
		}
	}
	if headersDiffer(a.GetResponseHeadersToAdd(), b.GetResponseHeadersToAdd()) {
		diffs = append(diffs, fmt.Sprintf("response headers %v\n  sluice: %v", a.GetResponseHeadersToAdd(), b.GetResponseHeadersToAdd()))
	}
	if !proto.Equal(a.GetDynamicMetadata(), b.GetDynamicMetadata()) {
		diffs = append(diffs, fmt.Sprintf("dynamic metadata %v\n  sluice: %v", a.GetDynamicMetadata(), b.GetDynamicMetadata()))
	}
	return strings.Join(diffs, "\n")
}

// headersDiffer says whether two answers' headers differ: the same keys
// in the same order with the same values, but a reset header's seconds,
// which may lie either side of a second, within one of each other.
func headersDiffer(a, b []*corev3.HeaderValue) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		ka, kb, va, vb := a[i].GetKey(), b[i].GetKey(), a[i].GetValue(), b[i].GetValue()
		if ka != kb {
			return true
		}
		if strings.EqualFold(ka, "RateLimit-Reset") {
			na, errA := strconv.Atoi(va)
			nb, errB := strconv.Atoi(vb)
			if errA != nil || errB != nil || na-nb > 1 || nb-na > 1 {
				return true
			}
		} else if va != vb {
			return true
		}
	}
	return false
}
