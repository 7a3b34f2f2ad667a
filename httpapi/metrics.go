package httpapi

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicelabs/sluice"
)

// MetricsHandler serves g's metrics on the service's own listener, where
// anyone who can send a check can ask. Series that name a tenant, a rule or
// an Envoy domain are served only to the operator token (every series) or
// a metrics-role key (its own tenant's); without credentials only the
// series that name none (process, store, engine) are served. An unknown
// credential answers 401, another role 403. Scraping everything without
// credentials belongs on a listener of its own (--metrics-addr), served by
// promhttp directly.
func (a *API) MetricsHandler(g prometheus.Gatherer) http.Handler {
	all := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	anonymous := promhttp.HandlerFor(ownSeriesOf(g, ""), promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := a.state.Load().snap
		secret := presented(r)
		if isAdminToken(snap, secret) {
			all.ServeHTTP(w, r)
			return
		}
		if secret.text == "" {
			anonymous.ServeHTTP(w, r)
			return
		}
		grant, aerr := tenantKey(snap, secret)
		if aerr == errUnknownKey {
			a.authLog.record(r, "metrics", "invalid_credentials")
			a.fail(w, &apiError{http.StatusUnauthorized, "invalid_credentials", "The token or API key is unknown or has been revoked."})
			return
		}
		if aerr != nil {
			a.fail(w, aerr)
			return
		}
		if grant.Role != sluice.RoleMetrics {
			a.fail(w, &apiError{http.StatusForbidden, "wrong_role",
				"This API key has the " + string(grant.Role) + " role; reading metrics needs the admin token or a key with the metrics role."})
			return
		}
		promhttp.HandlerFor(ownSeriesOf(g, grant.Tenant), promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// ownSeriesOf gathers g's series that tenant may see ("": those that name
// no tenant, rule or domain).
func ownSeriesOf(g prometheus.Gatherer, tenant string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		return ownSeries(mfs, tenant), err
	})
}

// ownSeries keeps the series of tenant and those that name no tenant, rule
// or domain; families left empty are dropped.
func ownSeries(mfs []*dto.MetricFamily, tenant string) []*dto.MetricFamily {
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if seriesOf(m, tenant) {
				kept = append(kept, m)
			}
		}
		if len(kept) > 0 {
			mf.Metric = kept
			out = append(out, mf)
		}
	}
	return out
}

// seriesOf reports whether m may be shown to tenant: its tenant label is
// tenant, or it names no tenant, rule or domain at all.
func seriesOf(m *dto.Metric, tenant string) bool {
	named, mine := false, false
	for _, lp := range m.GetLabel() {
		switch lp.GetName() {
		case "tenant":
			if lp.GetValue() != "" {
				named, mine = true, lp.GetValue() == tenant
			}
		case "rule", "domain":
			if lp.GetValue() != "" {
				named = true
			}
		}
	}
	if !named {
		return true
	}
	if !mine {
		return false
	}
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "domain" && lp.GetValue() != "" {
			return false // an Envoy domain is not a tenant's
		}
	}
	return true
}
