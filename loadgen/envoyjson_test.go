package loadgen_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicelabs/sluice/loadgen"
)

// jsonFace serves fakeRLS as envoyproxy/ratelimit's /json handler does: the
// body decoded by protojson, 200 for OK, 429 for OVER_LIMIT, and a gRPC
// error as its status's HTTP code would be written.
func jsonFace(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/json" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := fakeRLS{}.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, status.Convert(err).Message(), http.StatusServiceUnavailable)
			return
		}
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write([]byte(protojson.Format(resp)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestEnvoyJSONSendsTheRequestAndClassifiesAnswers(t *testing.T) {
	descriptors := []loadgen.Descriptor{{{Key: "api", Value: "orders"}, {Key: "user"}}, {{Key: "tier", Value: "free"}}}
	check, err := loadgen.NewEnvoyJSON(jsonFace(t), "api", descriptors, "user", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// fakeRLS refuses anything but domain api, hits 3 and two descriptors,
	// so an allowed answer shows the whole request went through.
	for subject, want := range map[string]loadgen.Outcome{"ok": loadgen.Allowed, "over": loadgen.Denied} {
		if out, err := check.Do(ctx, subject); err != nil || out != want {
			t.Errorf("%s: got %v, %v; want outcome %v", subject, out, err, want)
		}
	}
	if _, err := check.Do(ctx, "down"); err == nil || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("a 503 that is not shedding must be a failure, got %v", err)
	}
	if _, err := loadgen.NewEnvoyJSON("http://127.0.0.1:1", "", descriptors, "user", 1, 1); err == nil || !strings.Contains(err.Error(), "domain") {
		t.Errorf("an empty domain was accepted: %v", err)
	}
}
