package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/sluicelabs/sluice/gateway"
)

// TestGatewayPlanFromAJWTClaim: the verified token's plan claim puts a
// request on a plan; a token without it gets the route's limits, and a
// plan the route lacks is 400.
func TestGatewayPlanFromAJWTClaim(t *testing.T) {
	t.Setenv("GW_TEST_SECRET", hsSecret)
	up := newUpstream(t, "app")
	_, gw := startGateway(t, fmt.Sprintf(`
jwt:
  main: {hs256_secret_env: GW_TEST_SECRET, issuer: https://issuer.test, audience: [sluice-api]}
routes:
  - name: api
    path_prefix: /api
    upstream: %s
    auth: main
    plan_claim: plan
    limits: [{name: hour, algorithm: fixed_window, limit: 1, window: 1h}]
    plans:
      pro: [{name: hour, algorithm: fixed_window, limit: 3, window: 1h}]
`, up.URL))
	token := func(sub, plan string) map[string]string {
		c := claims(sub)
		if plan != "" {
			c["plan"] = plan
		}
		return bearer(sign(t, jwt.SigningMethodHS256, []byte(hsSecret), c, ""))
	}
	for _, c := range []struct {
		sub, plan string
		want      int
	}{{"alice", "", 1}, {"bob", "pro", 3}} {
		ok := 0
		for range 5 {
			if r := do(t, "GET", gw.URL+"/api", token(c.sub, c.plan)); r.status == 200 {
				ok++
			} else if r.status != 429 {
				t.Fatalf("%s: status %d %s", c.sub, r.status, r.body)
			}
		}
		if ok != c.want {
			t.Errorf("%s (plan %q): %d of 5 admitted, want %d", c.sub, c.plan, ok, c.want)
		}
	}
	before := up.hits.Load()
	if r := do(t, "GET", gw.URL+"/api", token("carol", "gold")); r.status != 400 || up.hits.Load() != before {
		t.Errorf("unknown plan: %d %s, want 400 without reaching the upstream", r.status, r.body)
	}
}

func TestGatewayPlanConfigRefusals(t *testing.T) {
	for name, c := range map[string]struct{ route, says string }{
		"claim_without_plans": {"plan_claim: plan\n    limits: [{name: h, algorithm: fixed_window, limit: 1, window: 1h}]", "has no plans"},
		"claim_without_auth": {"plan_claim: plan\n    limits: [{name: h, algorithm: fixed_window, limit: 1, window: 1h}]\n    plans: {pro: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}",
			"needs auth"},
		"plans_without_limits": {"plans: {pro: [{name: h, algorithm: fixed_window, limit: 2, window: 1h}]}", "needs limits too"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := gateway.ParseConfig([]byte("routes:\n  - name: api\n    path_prefix: /api\n    upstream: http://127.0.0.1:1\n    " + c.route + "\n"))
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %v, want one saying %q", err, c.says)
			}
		})
	}
}
