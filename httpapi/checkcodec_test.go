package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

// decodeReference decodes body the way every endpoint but the check codec
// does: decodeBody, which is encoding/json plus the strict rules (strictJSON,
// a pass over encoding/json's own tokens). What the strict rules promise is
// checked independently of strictJSON by checkStrictPromises.
func decodeReference(body []byte) (checkapi.Request, *apiError) {
	var req checkapi.Request
	r := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
	aerr := decodeBody(httptest.NewRecorder(), r, &req)
	return req, aerr
}

// checkStrictPromises fails t if body, accepted as req, breaks a strict rule,
// judged without strictJSON: raw bytes that are not UTF-8, a decoded string
// with a NUL or a U+FFFD the body does not spell, a field name not spelt
// exactly, a field given twice.
func checkStrictPromises(t *testing.T, body []byte, req checkapi.Request) {
	t.Helper()
	if !utf8.Valid(body) {
		t.Fatalf("body %s is not UTF-8, yet accepted as %s", shorten(body), describeDecode(req, nil))
	}
	// A U+FFFD is text the body may spell, raw or as an escape.
	literalFFFD := bytes.ContainsRune(body, utf8.RuneError) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
	for _, s := range []string{req.Route, req.Subject, req.Plan} {
		if strings.IndexByte(s, 0) >= 0 || (strings.ContainsRune(s, utf8.RuneError) && !literalFFFD) {
			t.Fatalf("body %s accepted as %s: a NUL or a replaced character", shorten(body), describeDecode(req, nil))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return // null: no fields
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("body %s accepted, yet: %v", shorten(body), err)
		}
		name := tok.(string)
		if name != "route" && name != "subject" && name != "cost" && name != "plan" && name != "reserve" {
			t.Fatalf("body %s accepted with field name %q", shorten(body), name)
		}
		if seen[name] {
			t.Fatalf("body %s accepted with field %q twice", shorten(body), name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("body %s accepted, yet: %v", shorten(body), err)
		}
	}
}

// decodeCodec decodes body with readCheckRequest and a pooled buffer, as the
// handler does.
func decodeCodec(body []byte) (checkapi.Request, *apiError) {
	bp := getCheckBuffer()
	defer putCheckBuffer(bp)
	r := httptest.NewRequest("POST", "/v1/check", bytes.NewReader(body))
	req, buf, aerr := readCheckRequest(httptest.NewRecorder(), r, *bp)
	*bp = buf
	return req, aerr
}

// describeDecode prints a decode's outcome so that two can be compared.
func describeDecode(req checkapi.Request, aerr *apiError) string {
	if aerr != nil {
		return fmt.Sprintf("%d %s %q", aerr.status, aerr.code, aerr.message)
	}
	cost := "absent"
	if req.Cost != nil {
		cost = fmt.Sprint(*req.Cost)
	}
	return fmt.Sprintf("route %q subject %q cost %s plan %q reserve %t", req.Route, req.Subject, cost, req.Plan, req.Reserve)
}

// checkDecodeAgrees fails t unless the codec decodes body as the reference
// (encoding/json plus the strict rules) does, and unless the fast path,
// whenever it answers, agrees too.
func checkDecodeAgrees(t *testing.T, body []byte) {
	t.Helper()
	ref, refErr := decodeReference(body)
	if refErr == nil {
		checkStrictPromises(t, body, ref)
	}
	want := describeDecode(ref, refErr)
	if got := describeDecode(decodeCodec(body)); got != want {
		t.Fatalf("body %s:\ncodec:         %.200s\nencoding/json: %.200s", shorten(body), got, want)
	}
	// Bodies too large never reach the fast path.
	if req, ok := parseCheckFast(body, nil); ok && len(body) <= MaxBodyBytes {
		if got := describeDecode(req, nil); got != want {
			t.Fatalf("body %s:\nfast path:     %.200s\nencoding/json: %.200s", shorten(body), got, want)
		}
	}
}

// shorten quotes b for a failure message, eliding the middle of a long one.
func shorten(b []byte) string {
	if len(b) <= 200 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...(%d bytes)...%q", b[:100], len(b)-200, b[len(b)-100:])
}

func TestReadCheckRequest(t *testing.T) {
	cost := func(n int64) *int64 { return &n }
	cases := []struct {
		name string
		body string
		// fast says the fast path must answer: the shapes clients send.
		fast bool
		want checkapi.Request
		// status and code of an error answer; 0 and "" for none.
		status int
		code   string
	}{
		{"route_only", `{"route":"/api/orders/17"}`, true, checkapi.Request{Route: "/api/orders/17"}, 0, ""},
		{"all_fields", `{"route": "/a", "subject": "user-1", "cost": 3}`, true, checkapi.Request{Route: "/a", Subject: "user-1", Cost: cost(3)}, 0, ""},
		{"fields_any_order", `{"cost":0,"subject":"s","route":"/r"}`, true, checkapi.Request{Route: "/r", Subject: "s", Cost: cost(0)}, 0, ""},
		{"whitespace_everywhere", " \t\r\n{ \n\"route\" \t: \r\"/a\" ,\n\"cost\"\n:\n7\n}\n\n ", true, checkapi.Request{Route: "/a", Cost: cost(7)}, 0, ""},
		{"empty_object", `{}`, true, checkapi.Request{}, 0, ""},
		{"empty_object_spaced", `{ }`, true, checkapi.Request{}, 0, ""},
		{"escapes", `{"route":"\/api\/x\"y\\z\b\f\n\r\t","subject":"\u00e9\u00E9"}`, true, checkapi.Request{Route: "/api/x\"y\\z\b\f\n\r\t", Subject: "éé"}, 0, ""},
		{"surrogate_pair", `{"route":"/a","subject":"\ud83d\ude00"}`, true, checkapi.Request{Route: "/a", Subject: "😀"}, 0, ""},
		{"replacement_char_is_text", "{\"route\":\"/a\",\"subject\":\"\\ufffd\xef\xbf\xbd\"}", true, checkapi.Request{Route: "/a", Subject: "\uFFFD\uFFFD"}, 0, ""},
		{"raw_utf8", `{"route":"/café","subject":"日本"}`, true, checkapi.Request{Route: "/café", Subject: "日本"}, 0, ""},
		{"del_and_html_kept", "{\"route\":\"/<a>&\x7f\"}", true, checkapi.Request{Route: "/<a>&\x7f"}, 0, ""},
		{"null_cost_is_absent", `{"route":"/a","cost":null}`, true, checkapi.Request{Route: "/a"}, 0, ""},
		{"null_subject_is_absent", `{"route":"/a","subject":null}`, true, checkapi.Request{Route: "/a"}, 0, ""},
		{"plan", `{"route":"/a","subject":"u","plan":"pro"}`, true, checkapi.Request{Route: "/a", Subject: "u", Plan: "pro"}, 0, ""},
		{"plan_first_escaped", `{"plan":"p\u00e9","route":"/a"}`, true, checkapi.Request{Route: "/a", Plan: "pé"}, 0, ""},
		{"null_plan_is_absent", `{"route":"/a","plan":null}`, true, checkapi.Request{Route: "/a"}, 0, ""},
		{"duplicate_plan", `{"route":"/a","plan":"a","plan":"b"}`, false, checkapi.Request{}, 400, "duplicate_field"},
		{"plan_number", `{"route":"/a","plan":1}`, false, checkapi.Request{}, 400, "invalid_request"},

		// The strict rules: names exact, each once, strings valid text
		// without NUL (encoding/json alone folds case, keeps the last
		// duplicate and replaces invalid UTF-8 with U+FFFD).
		{"field_names_are_case_sensitive", `{"ROUTE":"/a"}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"case_variant_after_exact_name", `{"route":"/a","Route":"/b"}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"long_s_does_not_fold_to_s", `{"route":"/a","ſubject":"u"}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"long_s_in_cost", `{"route":"/a","coſt":1}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"duplicate_route", `{"route":"/a","route":"/b"}`, false, checkapi.Request{}, 400, "duplicate_field"},
		{"duplicate_cost_with_null", `{"route":"/a","cost":5,"cost":null}`, false, checkapi.Request{}, 400, "duplicate_field"},
		{"duplicate_null_string", `{"route":"/a","subject":null,"subject":"s"}`, false, checkapi.Request{}, 400, "duplicate_field"},
		{"duplicate_escaped_name", `{"route":"/a","\u0072oute":"/b"}`, false, checkapi.Request{}, 400, "duplicate_field"},
		{"lone_high_surrogate", `{"route":"/a","subject":"x\ud83dy"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"high_surrogate_then_non_low", `{"route":"/a","subject":"\ud83d\u0041"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"two_high_surrogates_then_low", `{"route":"/a","subject":"\ud83d\ud83d\ude00"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"lone_low_surrogate", `{"route":"/a","subject":"\ude00"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"invalid_utf8", "{\"route\":\"/a\xff\xfeb\"}", false, checkapi.Request{}, 400, "invalid_request"},
		{"truncated_utf8", "{\"route\":\"/a\",\"subject\":\"\xe2\x82\"}", false, checkapi.Request{}, 400, "invalid_request"},
		{"utf8_encoded_surrogate", "{\"route\":\"/\xed\xa0\x80\"}", false, checkapi.Request{}, 400, "invalid_request"},
		{"invalid_utf8_after_escape", "{\"route\":\"/a\",\"subject\":\"\\n\xff\"}", false, checkapi.Request{}, 400, "invalid_request"},
		{"nul_escape", `{"route":"/a","subject":"a\u0000b"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"invalid_utf8_in_name", "{\"route\":\"/a\",\"\xff\":1}", false, checkapi.Request{}, 400, "invalid_request"},
		{"long_subject", `{"route":"/a","subject":"` + strings.Repeat("s", 3000) + `"}`, true, checkapi.Request{Route: "/a", Subject: strings.Repeat("s", 3000)}, 0, ""},

		// Shapes the fast path leaves to encoding/json but which are fine.
		{"escaped_field_name", `{"\u0072oute":"/a"}`, false, checkapi.Request{Route: "/a"}, 0, ""},

		// Errors: always decodeBytes's answer.
		{"empty_body", ``, false, checkapi.Request{}, 400, "malformed_json"},
		{"blank_body", " \n\t", false, checkapi.Request{}, 400, "malformed_json"},
		{"unicode_blank_body", "\u00a0\v", false, checkapi.Request{}, 400, "malformed_json"},
		{"not_json", `route=/api`, false, checkapi.Request{}, 400, "malformed_json"},
		{"truncated", `{"route": "/api/payments"`, false, checkapi.Request{}, 400, "malformed_json"},
		{"truncated_string", `{"route": "/api`, false, checkapi.Request{}, 400, "malformed_json"},
		{"array", `[1]`, false, checkapi.Request{}, 400, "malformed_json"},
		{"string_body", `"x"`, false, checkapi.Request{}, 400, "malformed_json"},
		{"null_body", `null`, false, checkapi.Request{}, 0, ""},
		{"two_objects", `{"route": "/a"} {"route": "/b"}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"trailing_brace", `{"route": "/a"}}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"trailing_garbage", `{"route": "/a"}x`, false, checkapi.Request{}, 400, "malformed_json"},
		{"trailing_comma", `{"route": "/a",}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"byte_order_mark", "\xef\xbb\xbf{\"route\":\"/a\"}", false, checkapi.Request{}, 400, "malformed_json"},
		{"control_char_in_string", "{\"route\":\"/a\x01\"}", false, checkapi.Request{}, 400, "malformed_json"},
		{"single_quote_escape", `{"route":"/a\'"}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"bad_unicode_escape", `{"route":"/a\u12G4"}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"unknown_field", `{"route": "/api/payments", "tenant": "other"}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"unknown_field_after_type_error", `{"route": 1, "tenant": "other"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"type_error_after_unknown_field", `{"tenant": "other", "route": 1}`, false, checkapi.Request{}, 400, "unknown_field"},
		{"syntax_error_after_unknown_field", `{"tenant": "other", "route": }`, false, checkapi.Request{}, 400, "malformed_json"},
		{"fractional_cost", `{"route": "/a", "cost": 1.5}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"integral_fraction_cost", `{"route": "/a", "cost": 1.0}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"exponent_cost", `{"route": "/a", "cost": 1e3}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"huge_cost", `{"route": "/a", "cost": 1e30}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"cost_above_int64", `{"route": "/a", "cost": 9223372036854775808}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"cost_below_int64", `{"route": "/a", "cost": -9223372036854775809}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"cost_twenty_digits", `{"route": "/a", "cost": 10000000000000000000}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"cost_leading_zero", `{"route": "/a", "cost": 01}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"cost_plus_sign", `{"route": "/a", "cost": +1}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"cost_string", `{"route": "/a", "cost": "1"}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"cost_bool", `{"route": "/a", "cost": true}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"route_number", `{"route": 17}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"route_object", `{"route": {}}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"route_array", `{"route": ["/a"]}`, false, checkapi.Request{}, 400, "invalid_request"},
		{"nul_literal_typo", `{"route": nul}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"null_then_letters", `{"route": nullx}`, false, checkapi.Request{}, 400, "malformed_json"},
		{"too_large", `{"route": "/a", "subject": "` + strings.Repeat("s", MaxBodyBytes) + `"}`, false, checkapi.Request{}, 413, "body_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			checkDecodeAgrees(t, body)

			req, aerr := decodeCodec(body)
			if c.status != 0 {
				if aerr == nil || aerr.status != c.status || aerr.code != c.code {
					t.Fatalf("got %s, want %d %s", describeDecode(req, aerr), c.status, c.code)
				}
				return
			}
			if got, want := describeDecode(req, aerr), describeDecode(c.want, nil); got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
			if _, ok := parseCheckFast(body, nil); ok != c.fast {
				t.Errorf("fast path answered: %v, want %v", ok, c.fast)
			}
		})
	}
}

// TestReadCheckRequestOwnsItsStrings checks that the decoded strings survive
// the buffer going back to the pool and being written over.
func TestReadCheckRequestOwnsItsStrings(t *testing.T) {
	buf := make([]byte, 0, 4096)
	for _, body := range []string{`{"route":"/a/b","subject":"u-1","cost":2}`, `{"route":"\/a\/b","subject":"u\u002d1"}`} {
		r := httptest.NewRequest("POST", "/v1/check", strings.NewReader(body))
		req, got, aerr := readCheckRequest(httptest.NewRecorder(), r, buf)
		if aerr != nil {
			t.Fatal(aerr)
		}
		if &got[:1][0] != &buf[:1][0] {
			t.Errorf("the body was not read into the buffer given")
		}
		clear(got[:cap(got)])
		if req.Route != "/a/b" || req.Subject != "u-1" {
			t.Errorf("after the buffer was cleared: route %q, subject %q", req.Route, req.Subject)
		}
	}
}

// TestReadCheckRequestFromBadReader checks a body that fails to read.
func TestReadCheckRequestFromBadReader(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/check", io.MultiReader(strings.NewReader(`{"route":`), errReader{}))
	_, _, aerr := readCheckRequest(httptest.NewRecorder(), r, nil)
	if aerr == nil || aerr.status != http.StatusBadRequest || aerr.code != "invalid_request" {
		t.Fatalf("got %v, want 400 invalid_request", aerr)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestReadCheckRequestTooLargeClosesConnection checks that an oversized body
// is answered as decodeBody answers it, including the server being told not
// to read the rest (Connection: close).
func TestReadCheckRequestTooLargeClosesConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, aerr := readCheckRequest(w, r, nil)
		if aerr == nil {
			writeDecision(w, http.StatusOK, "", sluice.Decision{Allowed: true}, false, choice{})
			return
		}
		writeError(w, aerr.status, aerr.code, aerr.message)
	}))
	defer srv.Close()
	body := `{"route":"/a","subject":"` + strings.Repeat("s", 2*MaxBodyBytes) + `"}`
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !bytes.Contains(got, []byte(`"body_too_large"`)) {
		t.Fatalf("got %d %s, want 413 body_too_large", resp.StatusCode, got)
	}
	if !resp.Close {
		t.Errorf("the server kept the connection open after a body too large")
	}
}

// encodeReference is what handleCheck writes today.
func encodeReference(t testing.TB, rule string, d sluice.Decision, shadow bool, chose choice) []byte {
	w := httptest.NewRecorder()
	body := checkapi.NewDecision(rule, d, shadow)
	body.Plan, body.Override = chose.plan, chose.override
	writeJSON(w, http.StatusOK, body)
	if w.Code != http.StatusOK {
		t.Fatalf("encoding/json failed: %s", w.Body)
	}
	return w.Body.Bytes()
}

func TestAppendDecisionJSON(t *testing.T) {
	twoLimits := []sluice.LimitDecision{
		{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Limit: 10, Remaining: 9, ResetAfter: 100 * time.Millisecond, Window: time.Second},
		{Name: "minute", Algorithm: sluice.AlgorithmSlidingWindow, Allowed: false, Limit: 60, Remaining: 0, ResetAfter: time.Minute, RetryAfter: 1500*time.Microsecond + 1},
	}
	cases := []struct {
		name   string
		rule   string
		d      sluice.Decision
		shadow bool
		want   string // "" to compare with encoding/json only
		chose  choice
	}{
		{"no_rule", "", sluice.Decision{Allowed: true}, false,
			`{"allowed":true,"rule":null,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[]}` + "\n", choice{}},
		{"denied", "orders", sluice.Decision{Limit: 60, Remaining: 0, ResetAfter: time.Minute, RetryAfter: 1500*time.Microsecond + 1, Limits: twoLimits}, false,
			`{"allowed":false,"rule":"orders","limit":60,"remaining":0,"reset_after_ms":60000,"retry_after_ms":2,"degraded":false,"shadow":false,` +
				`"limits":[{"name":"burst","algorithm":"token_bucket","limit":10,"remaining":9,"reset_after_ms":100,"retry_after_ms":0},` +
				`{"name":"minute","algorithm":"sliding_window","limit":60,"remaining":0,"reset_after_ms":60000,"retry_after_ms":2}]}` + "\n", choice{}},
		{"shadow_answer", "r", sluice.Decision{Allowed: true, Degraded: true}, true,
			`{"allowed":true,"rule":"r","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":true,"shadow":true,"limits":[]}` + "\n", choice{}},
		{"negative_and_extreme_numbers", "r", sluice.Decision{Allowed: true, Limit: math.MinInt64, Remaining: math.MaxInt64, ResetAfter: -time.Second, RetryAfter: math.MaxInt64,
			Limits: []sluice.LimitDecision{{Limit: -1, Remaining: math.MinInt64, ResetAfter: math.MinInt64, RetryAfter: 1}}}, false, "", choice{}},
		{"empty_limit_names", "r", sluice.Decision{Limits: []sluice.LimitDecision{{}}}, false, "", choice{}},
		{"plan_and_override", "r", sluice.Decision{Allowed: true}, false,
			`{"allowed":true,"rule":"r","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[],"plan":"pro","override":"acme-week"}` + "\n",
			choice{"pro", "acme-week"}},
		{"plan_only_escaped", "r", sluice.Decision{Allowed: true}, false, "", choice{plan: "p\"\u2028"}},
		{"escaped_strings", "a\"b\\c\b\f\n\r\t\x00\x01\x1f\x7f<>&/\u2028\u2029é😀\uFFFD", sluice.Decision{
			Limits: []sluice.LimitDecision{{Name: "\xff\xfe\xed\xa0\x80x\xe2\x82", Algorithm: "\u2027\u202a"}}}, false, "", choice{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := appendDecisionJSON(nil, c.rule, c.d, c.shadow, c.chose)
			if want := encodeReference(t, c.rule, c.d, c.shadow, c.chose); !bytes.Equal(got, want) {
				t.Errorf("codec:         %s\nencoding/json: %s", got, want)
			}
			if c.want != "" && string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			prefix := []byte("prefix")
			if got := appendDecisionJSON(prefix, c.rule, c.d, c.shadow, choice{}); !bytes.HasPrefix(got, prefix) {
				t.Errorf("appending to %q lost it: %q", prefix, got)
			}
		})
	}
}

// TestWriteDecision checks that writeDecision answers as writeJSON does:
// status, headers and bytes.
func TestWriteDecision(t *testing.T) {
	d := sluice.Decision{Limit: 5, RetryAfter: time.Second, Limits: []sluice.LimitDecision{{Name: "day", Algorithm: sluice.AlgorithmFixedWindow, Limit: 5}}}
	for _, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
		want := httptest.NewRecorder()
		writeJSON(want, status, checkapi.NewDecision("daily", d, false))
		got := httptest.NewRecorder()
		writeDecision(got, status, "daily", d, false, choice{})
		if got.Code != want.Code || got.Body.String() != want.Body.String() {
			t.Errorf("got %d %s, want %d %s", got.Code, got.Body, want.Code, want.Body)
		}
		if fmt.Sprint(got.Header()) != fmt.Sprint(want.Header()) {
			t.Errorf("headers %v, want %v", got.Header(), want.Header())
		}
	}
}

// TestCheckCodecAllocs pins the allocations of the common case: reading a
// body into a buffer that fits it costs the one string holding route and
// subject and the cost (the MaxBytesReader stays on the stack); writing an
// answer into a buffer that fits it costs nothing.
func TestCheckCodecAllocs(t *testing.T) {
	w := httptest.NewRecorder()
	buf := make([]byte, 0, 1024)
	for _, body := range []string{
		`{"route": "/api/orders/17", "subject": "user-42", "cost": 2}`,
		`{"route": "\/api\/orders\/17", "subject": "user\u002d42", "cost": 2}`,
	} {
		rd := strings.NewReader(body)
		r := httptest.NewRequest("POST", "/v1/check", rd)
		r.Body = io.NopCloser(rd)
		allocs := testing.AllocsPerRun(100, func() {
			rd.Reset(body)
			req, _, aerr := readCheckRequest(w, r, buf)
			if aerr != nil || req.Subject != "user-42" {
				t.Fatal(describeDecode(req, aerr))
			}
		})
		// One string for route and subject, one int64 for the cost.
		if allocs > 2 {
			t.Errorf("readCheckRequest(%s): %v allocations, want at most 2", body, allocs)
		}
	}

	d := sluice.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second, Limits: []sluice.LimitDecision{
		{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Limit: 10, Remaining: 9, ResetAfter: time.Second},
		{Name: "minute", Algorithm: sluice.AlgorithmSlidingWindow, Limit: 600, Remaining: 599, ResetAfter: time.Minute},
	}}
	allocs := testing.AllocsPerRun(100, func() {
		buf = appendDecisionJSON(buf[:0], "orders", d, false, choice{})
	})
	if allocs != 0 {
		t.Errorf("appendDecisionJSON: %v allocations, want 0", allocs)
	}
}

// FuzzCheckCodec compares the codec with the reference, encoding/json plus
// the strict rules: the body decoded by both (same answer, same error, same
// values; the fast path, when it answers, agrees; nothing accepted breaks a
// strict rule) and a decision built from the other arguments encoded by
// both (same bytes).
func FuzzCheckCodec(f *testing.F) {
	bodies := []string{
		`{"route":"/api/orders/17","subject":"user-42","cost":1}`,
		`{"route": "/a", "subject": "\u00e9\ud83d\ude00\ud800", "cost": -0}`,
		`{"ROUTE":"/a","route":null,"Cost":9223372036854775807,"cost":null}`,
		`{"subject":"s","cost":1.5}`,
		`{"route":"/a","cost":1e3}`,
		`{"route":"/a","tenant":"x"}`,
		`{"route":17}`,
		`{"ſubject":"x","\u0072oute":"/r"}`,
		`{"route":"/a","route":"/b","subject":"\u0000"}`,
		`{"route":"/a","subject":"\ud83d\ude00\ufffd"}`,
		" {\"route\" : \"/a\\/b\\n\" }\n{",
		"{\"route\":\"\xff\xed\xa0\x80\"}",
		`[]`,
		``,
		`null`,
	}
	for i, body := range bodies {
		f.Add([]byte(body), "orders", "burst", "token_bucket", int64(10), int64(i-3), int64(time.Second)+1, int64(-i), uint8(i))
	}
	f.Add([]byte(`{}`), "", "\u2028<&>\"\\\x00", "\xff", int64(math.MinInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MinInt64), uint8(0xff))
	f.Fuzz(func(t *testing.T, body []byte, rule, name, algorithm string, limit, remaining, resetNs, retryNs int64, flags uint8) {
		checkDecodeAgrees(t, body)
		// Random bytes are rarely a JSON object: also try them inside one,
		// as a string, a number and a field name, to reach the fast path.
		for _, frame := range [][2]string{{`{"route":"`, `"}`}, {`{"route":"/a","cost":`, `}`}, {`{"`, `":null}`}} {
			checkDecodeAgrees(t, slices.Concat([]byte(frame[0]), body, []byte(frame[1])))
		}

		d := sluice.Decision{
			Allowed:    flags&1 != 0,
			Degraded:   flags&2 != 0,
			Limit:      limit,
			Remaining:  remaining,
			ResetAfter: time.Duration(resetNs),
			RetryAfter: time.Duration(retryNs),
		}
		for k := range int(flags>>4) % 4 {
			d.Limits = append(d.Limits, sluice.LimitDecision{
				Name:       name[:len(name)*k/3],
				Algorithm:  sluice.Algorithm(algorithm),
				Limit:      remaining - int64(k),
				Remaining:  limit + int64(k),
				ResetAfter: time.Duration(retryNs) * time.Duration(k),
				RetryAfter: time.Duration(resetNs) >> k,
			})
		}
		shadow := flags&4 != 0
		var chose choice
		if flags&8 != 0 {
			chose = choice{plan: name, override: rule}
		}
		got := appendDecisionJSON(nil, rule, d, shadow, chose)
		if want := encodeReference(t, rule, d, shadow, chose); !bytes.Equal(got, want) {
			t.Fatalf("codec:         %s\nencoding/json: %s", got, want)
		}
		var back map[string]any
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%s is not JSON: %v", got, err)
		}
	})
}

// benchWriter is a ResponseWriter that keeps nothing but its header map.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *benchWriter) WriteHeader(int)             {}

// BenchmarkCheckCodecDecode reads and decodes a typical check body with the
// codec and with decodeBody (encoding/json).
func BenchmarkCheckCodecDecode(b *testing.B) {
	body := []byte(`{"route": "/api/orders/17", "subject": "user-42", "cost": 2}`)
	setup := func() (*http.Request, *bytes.Reader) {
		rd := bytes.NewReader(body)
		r := httptest.NewRequest("POST", "/v1/check", rd)
		r.Body = io.NopCloser(rd)
		return r, rd
	}
	w := &benchWriter{h: http.Header{}}
	b.Run("codec", func(b *testing.B) {
		r, rd := setup()
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(body)
			bp := getCheckBuffer()
			req, buf, aerr := readCheckRequest(w, r, *bp)
			*bp = buf
			putCheckBuffer(bp)
			if aerr != nil || req.Cost == nil {
				b.Fatal(describeDecode(req, aerr))
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		r, rd := setup()
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(body)
			var req checkapi.Request
			if aerr := decodeBody(w, r, &req); aerr != nil || req.Cost == nil {
				b.Fatal(describeDecode(req, aerr))
			}
		}
	})
}

// BenchmarkCheckCodecEncode writes a two-limit decision with writeDecision
// and with writeJSON(checkapi.NewDecision(...)); the "append" pair leaves out the
// ResponseWriter (whose two header values cost an allocation each).
func BenchmarkCheckCodecEncode(b *testing.B) {
	d := sluice.Decision{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second, Limits: []sluice.LimitDecision{
		{Name: "burst", Algorithm: sluice.AlgorithmTokenBucket, Limit: 10, Remaining: 9, ResetAfter: time.Second},
		{Name: "minute", Algorithm: sluice.AlgorithmSlidingWindow, Limit: 600, Remaining: 599, ResetAfter: time.Minute},
	}}
	w := &benchWriter{h: http.Header{}}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeDecision(w, http.StatusOK, "orders", d, false, choice{})
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeJSON(w, http.StatusOK, checkapi.NewDecision("orders", d, false))
		}
	})
	b.Run("append_codec", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendDecisionJSON(buf[:0], "orders", d, false, choice{})
		}
	})
	b.Run("append_encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		for b.Loop() {
			buf.Reset()
			if err := enc.Encode(checkapi.NewDecision("orders", d, false)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
