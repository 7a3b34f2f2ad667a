package envoyrls

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a POST /json body.
const maxJSONBody = 64 << 10

// JSONHandler serves POST /json as envoyproxy/ratelimit does: the body is a
// RateLimitRequest and the answer a RateLimitResponse, both in the protobuf
// JSON mapping; 200 when OK, 429 when OVER_LIMIT. Errors use Sluice's error
// body: 400 for a malformed request or one past the request bounds
// (MaxDescriptors...), 413 for a body over 64 KiB, 503 when the store or the
// configuration is unavailable. It takes no credentials, like
// envoyproxy/ratelimit's: whoever reaches it can spend any descriptor's
// quota, so serve it only where trusted callers alone can.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSONError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST with a JSON RateLimitRequest body")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeJSONError(w, http.StatusRequestEntityTooLarge, "body_too_large", "the request body is larger than 64 KiB")
				return
			}
			writeJSONError(w, http.StatusBadRequest, "bad_body", "the request body could not be read")
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeJSONError(w, http.StatusBadRequest, "malformed_json", "the body is not a valid JSON RateLimitRequest: "+err.Error())
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code, httpStatus := "internal", http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code, httpStatus = "invalid_request", http.StatusBadRequest
			case codes.Unavailable:
				code, httpStatus = "store_unavailable", http.StatusServiceUnavailable
				w.Header().Set("Retry-After", "1")
			case codes.Canceled, codes.DeadlineExceeded:
				code, httpStatus = "canceled", http.StatusServiceUnavailable
			}
			writeJSONError(w, httpStatus, code, st.Message())
			return
		}
		// Zeros are written (limitRemaining: 0), so "none left" never reads as
		// "no limit".
		out, err := protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(resp)
		if err != nil {
			writeJSONError(w, http.StatusInternalServerError, "internal", "the response could not be encoded")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

// HealthHandler serves GET /healthcheck as envoyproxy/ratelimit does, so
// probes written for it keep working: 200 "OK" while the gRPC health status
// is SERVING (a configuration is loaded and the server is not shutting
// down), else 500.
func (s *Server) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := s.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "NOT SERVING", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("OK"))
	})
}

func writeJSONError(w http.ResponseWriter, httpStatus int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": message}})
}
