package checkapi_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

func TestRequestWritesOnlyWhatItSays(t *testing.T) {
	zero, three := int64(0), int64(3)
	for _, c := range []struct {
		name string
		req  checkapi.Request
		want string
	}{
		{"defaults_are_absent", checkapi.Request{Route: "/a"}, `{"route":"/a"}`},
		{"peek_is_written", checkapi.Request{Route: "/a", Cost: &zero}, `{"route":"/a","cost":0}`},
		{"every_field", checkapi.Request{Route: "/a", Subject: "u", Cost: &three, Reserve: true}, `{"route":"/a","subject":"u","cost":3,"reserve":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := json.Marshal(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("encoded %s, want %s", got, c.want)
			}
			var back checkapi.Request
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, c.req) {
				t.Fatalf("decoded %+v, want %+v", back, c.req)
			}
		})
	}
	if got := (checkapi.Request{}).CostOrDefault(); got != 1 {
		t.Errorf("absent cost is %d, want 1", got)
	}
	if got := (checkapi.Request{Cost: &zero}).CostOrDefault(); got != 0 {
		t.Errorf("cost 0 is %d, want 0 (a peek)", got)
	}
}

// A decision crosses the wire without loss: the store's figures in whole
// milliseconds, each limit's verdict, zeros written.
func TestDecisionRoundTrip(t *testing.T) {
	d := sluice.Decision{
		Limit: 5, ResetAfter: time.Minute, RetryAfter: 12 * time.Second,
		Limits: []sluice.LimitDecision{
			{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 1500 * time.Millisecond},
			{Name: "minute", Algorithm: sluice.AlgorithmFixedWindow, Limit: 5, ResetAfter: time.Minute, RetryAfter: 12 * time.Second},
		},
		Binding: 1,
	}
	raw, err := json.Marshal(checkapi.NewDecision("orders", d, false))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"allowed":false,"rule":"orders","limit":5,"remaining":0,"reset_after_ms":60000,"retry_after_ms":12000,"degraded":false,"shadow":false,` +
		`"limits":[{"name":"burst","algorithm":"token_bucket","limit":10,"remaining":7,"reset_after_ms":1500,"retry_after_ms":0},` +
		`{"name":"minute","algorithm":"fixed_window","limit":5,"remaining":0,"reset_after_ms":60000,"retry_after_ms":12000}]}`
	if string(raw) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", raw, want)
	}
	var back checkapi.Decision
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.StoreDecision(); !reflect.DeepEqual(got, d) {
		t.Fatalf("decoded %+v\nwant    %+v", got, d)
	}
	if back.RuleName() != "orders" {
		t.Errorf("rule %q, want orders", back.RuleName())
	}
}

func TestDecisionWithoutRuleOrHold(t *testing.T) {
	raw, err := json.Marshal(checkapi.NewDecision("", sluice.Decision{Allowed: true}, false))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"allowed":true,"rule":null,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[]}`
	if string(raw) != want {
		t.Fatalf("encoded %s, want %s", raw, want)
	}
	var back checkapi.Decision
	if err := json.Unmarshal([]byte(`{"allowed":true,"rule":"jobs","limits":[],"hold":{"id":"h1","expires_in_ms":30000}}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Hold == nil || *back.Hold != (checkapi.Hold{ID: "h1", ExpiresInMs: 30000}) {
		t.Fatalf("hold %+v, want h1 expiring in 30000 ms", back.Hold)
	}
}

func TestShadowIsAllowedWithTheFiguresOfTheDeny(t *testing.T) {
	// As the engine answers a shadow rule's deny: allowed, with the figures.
	d := sluice.Decision{Allowed: true, Limit: 1, RetryAfter: time.Second, Limits: []sluice.LimitDecision{
		{Name: "day", Algorithm: sluice.AlgorithmFixedWindow, Limit: 1, RetryAfter: time.Second}}}
	w := checkapi.NewDecision("r", d, true)
	if !w.Allowed || !w.Shadow || w.RetryAfterMs != 1000 || w.Limits[0].RetryAfterMs != 1000 {
		t.Fatalf("shadow answer %+v: want allowed, shadow, and the deny's wait", w)
	}
}
