package adminapi_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/adminapi"
)

func TestCreditsAndCalendarLimitsOnTheWire(t *testing.T) {
	for _, body := range []string{
		`{"name":"credits","algorithm":"credits","refill":{"every":"month","amount":1000,"mode":"set"}}`,
		`{"name":"tokens","algorithm":"credits","refill":{"every":"12h","amount":5,"mode":"add","max":50}}`,
		`{"name":"prepaid","algorithm":"credits"}`,
		`{"name":"month","algorithm":"fixed_window","limit":1000000,"window":"month","time_zone":"Europe/Berlin"}`,
		`{"name":"day","algorithm":"fixed_window","limit":100,"window":"day"}`,
	} {
		var j adminapi.Limit
		if err := json.Unmarshal([]byte(body), &j); err != nil {
			t.Fatal(err)
		}
		l, err := j.ToLimit()
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		out, err := json.Marshal(adminapi.NewLimit(l))
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != body {
			t.Fatalf("read %s, wrote %s", body, out)
		}
	}
	l, _ := adminapi.Limit{Name: "m", Algorithm: "fixed_window", Limit: ptr(5), Window: "month", TimeZone: "Europe/Berlin"}.ToLimit()
	if l.Calendar != sluice.CalendarMonth || l.TimeZone != "Europe/Berlin" || l.Window != 0 {
		t.Fatalf("calendar window read as %+v", l)
	}
}

func TestCreditsAndCalendarBadInput(t *testing.T) {
	for body, says := range map[string]string{
		`{"name":"b","algorithm":"token_bucket","capacity":5,"refill_per_second":1,"refill":{"every":"day","amount":5,"mode":"set"}}`: "only a credits limit takes a refill",
		`{"name":"w","algorithm":"fixed_window","limit":5,"window":"1m","refill":{"every":"day","amount":5,"mode":"set"}}`:            "only a credits limit takes a refill",
		`{"name":"c","algorithm":"credits","limit":5}`:                                                "takes only a refill",
		`{"name":"c","algorithm":"credits","refill":{"every":"week","amount":5,"mode":"set"}}`:        `refill every must be "day", "month" or a duration`,
		`{"name":"c","algorithm":"credits","refill":{"every":"day","amount":-5,"mode":"set"}}`:        "amount must be a positive integer",
		`{"name":"c","algorithm":"credits","refill":{"every":"day","amount":5,"mode":"double"}}`:      `mode must be "set" or "add"`,
		`{"name":"c","algorithm":"credits","refill":{"every":"day","amount":5,"mode":"add","max":0}}`: "max must be a positive integer",
		`{"name":"s","algorithm":"sliding_window","limit":5,"window":"month"}`:                        "only a fixed_window takes a calendar window",
		`{"name":"z","algorithm":"fixed_window","limit":5,"window":"day","time_zone":"Mars/Base"}`:    "not a known IANA time zone",
		`{"name":"z","algorithm":"fixed_window","limit":5,"window":"1h","time_zone":"UTC"}`:           "time_zone applies to a fixed_window",
	} {
		var j adminapi.Limit
		if err := json.Unmarshal([]byte(body), &j); err != nil {
			t.Fatal(err)
		}
		if _, err := j.ToLimit(); !errors.Is(err, sluice.ErrInvalid) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: got %v, want an invalid-input error saying %q", body, err, says)
		}
	}
}

func ptr(n int64) *int64 { return &n }
