package httpapi

// Every request and answer of this package's tests is checked against
// openapi.json: TestMain installs testHandlerHook, so every API.Handler a test
// serves (through the harness's httptest.Server or a ResponseRecorder)
// validates each exchange with libopenapi-validator (chosen over kin-openapi
// for its complete OpenAPI 3.1 / JSON Schema 2020-12 support). A mismatch
// fails the test that made the call (bound with bindOpenAPI), or, if no test
// is bound to that API, the whole run from TestMain: the document cannot
// drift from the code unnoticed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/sluicelabs/sluice/checkapi"
)

func TestMain(m *testing.M) {
	testHandlerHook = validateAgainstOpenAPI
	code := m.Run()
	if v := unboundViolations.take(); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d exchanges of APIs no test was bound to do not match openapi.json:\n", len(v))
		for _, msg := range v {
			fmt.Fprintln(os.Stderr, "  "+msg)
		}
		code = 1
	}
	os.Exit(code)
}

// openAPI is the document, parsed once, and its validator.
var openAPI = sync.OnceValues(func() (*openAPIModel, error) {
	doc, err := libopenapi.NewDocument(openAPIDocument)
	if err != nil {
		return nil, err
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, errs[0]
	}
	mux := http.NewServeMux()
	for _, rt := range (&API{}).routes() {
		mux.HandleFunc(rt.pattern, func(http.ResponseWriter, *http.Request) {})
	}
	return &openAPIModel{doc: doc, model: &model.Model, v: v, routes: mux}, nil
})

type openAPIModel struct {
	doc   libopenapi.Document
	model *v3.Document
	// mu serialises validations: the validator does not document itself
	// safe for concurrent use, and some tests send checks in parallel.
	mu sync.Mutex
	v  validator.Validator
	// routes is a mux of routes() alone, to tell whether a request names an
	// endpoint the way the API's own mux does.
	routes *http.ServeMux
}

// violations collects mismatches.
type violations struct {
	mu   sync.Mutex
	msgs []string
}

func (v *violations) add(msg string) {
	v.mu.Lock()
	v.msgs = append(v.msgs, msg)
	v.mu.Unlock()
}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.msgs
	v.msgs = nil
	return out
}

var (
	unboundViolations violations
	// exchangesChecked counts validations, to show the hook is installed.
	exchangesChecked atomic.Int64
	// boundTests maps an *API to the test that reports its mismatches.
	boundTests sync.Map
)

// reporter is what bindOpenAPI needs of a test: *testing.T and *rapid.T.
type reporter interface {
	Error(args ...any)
	Cleanup(func())
}

// bindOpenAPI makes t fail on any exchange of a's handlers that does not
// match openapi.json (otherwise the run fails at its end).
func bindOpenAPI(t reporter, a *API) {
	boundTests.Store(a, t)
	t.Cleanup(func() { boundTests.CompareAndDelete(a, t) })
}

// validateAgainstOpenAPI is testHandlerHook: it serves each request with
// next into a recorder, checks the exchange, reports a mismatch, and only
// then passes the answer on, so that the mismatch is reported while the
// test that made the call is still running.
func validateAgainstOpenAPI(a *API, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body.Close()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)

		exchangesChecked.Add(1)
		if problems := checkExchange(r, body, rec.Result()); len(problems) > 0 {
			msg := fmt.Sprintf("openapi.json does not match %s %s answered %d: %s",
				r.Method, r.URL.RequestURI(), rec.Code, strings.Join(problems, "; "))
			if t, ok := boundTests.Load(a); ok {
				t.(reporter).Error(msg)
			} else {
				unboundViolations.add(msg)
			}
		}

		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// checkExchange returns what in a request (with its body) and its answer
// disagrees with the document:
//
//   - the answer must match the operation's response for its status (an
//     undocumented status, a body or a header off its schema);
//   - a request the document refuses must be refused by the server too (a
//     4xx answer): the document may not be stricter than the code;
//   - a request for no documented operation must answer 404 not_found or
//     405 method_not_allowed with an Allow header.
func checkExchange(r *http.Request, body []byte, resp *http.Response) []string {
	oa, err := openAPI()
	if err != nil {
		return []string{"openapi.json does not load: " + err.Error()}
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(respBody))

	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	if len(body) > 0 {
		// The server reads every body as JSON whatever its Content-Type
		// says (curl -d sends form-urlencoded); the document says JSON.
		req.Header.Set("Content-Type", "application/json")
	}

	if _, pattern := oa.routes.Handler(req); pattern == "" {
		return checkNoOperation(resp, respBody)
	}

	oa.mu.Lock()
	_, reqErrs := oa.v.ValidateHttpRequestSync(req)
	_, respErrs := oa.v.ValidateHttpResponse(req, resp)
	oa.mu.Unlock()

	var problems []string
	for _, e := range respErrs {
		problems = append(problems, "answer: "+describe(e))
	}
	if len(reqErrs) > 0 && (resp.StatusCode < 400 || resp.StatusCode > 499) {
		for _, e := range reqErrs {
			problems = append(problems, "the document refuses the request the server did not refuse: "+describe(e))
		}
	}
	return problems
}

// checkNoOperation checks the answer to a request for no route.
func checkNoOperation(resp *http.Response, body []byte) []string {
	want := map[int]string{http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed"}[resp.StatusCode]
	if want == "" {
		return []string{fmt.Sprintf("no documented operation, yet status %d (want 404 or 405)", resp.StatusCode)}
	}
	var problems []string
	var e checkapi.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error.Code != want || e.Error.Message == "" {
		problems = append(problems, fmt.Sprintf("want the error body with code %s, got %q", want, body))
	}
	if resp.StatusCode == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
		problems = append(problems, "405 without an Allow header")
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		problems = append(problems, fmt.Sprintf("Content-Type %q, want application/json", ct))
	}
	return problems
}

func describe(e *liberrors.ValidationError) string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Reason != "" && e.Reason != e.Message {
		b.WriteString(" (" + e.Reason + ")")
	}
	for _, s := range e.SchemaValidationErrors {
		b.WriteString(" [" + s.Reason)
		if s.FieldPath != "" {
			b.WriteString(" at " + s.FieldPath)
		}
		b.WriteString("]")
	}
	return b.String()
}

// TestOpenAPIDocument fetches the document from the API, checks that it is
// valid OpenAPI 3.1, and that its operations are exactly the routes Register
// mounts (plus /metrics, which sluice serve mounts beside them).
func TestOpenAPIDocument(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	before := exchangesChecked.Load()
	r := h.must(http.StatusOK, "GET", "/v1/openapi.json", "", nil)
	if exchangesChecked.Load() == before {
		t.Fatal("the harness's answers are not validated against openapi.json: is testHandlerHook installed?")
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if r.raw != string(openAPIDocument) {
		t.Fatal("GET /v1/openapi.json does not answer the embedded document")
	}

	doc, err := libopenapi.NewDocument([]byte(r.raw))
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("not valid OpenAPI 3.1: %s", describe(e))
		}
	}

	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	registered := []string{"GET /metrics"} // mounted by cmd/sluice, not Register
	for _, rt := range (&API{}).routes() {
		// A ServeMux wildcard {x...} is an OpenAPI parameter {x}.
		pattern := strings.ReplaceAll(rt.pattern, "...}", "}")
		if pattern == "POST /v1/tenants/{tenant}/rules/{name}/subjects/{subject}" {
			// The subject wildcard takes the rest of the path; the handler
			// matches the "/credits" the document names.
			pattern += "/credits"
		}
		registered = append(registered, pattern)
	}
	sort.Strings(documented)
	sort.Strings(registered)
	for _, op := range registered {
		if !slices.Contains(documented, op) {
			t.Errorf("route %s is not in openapi.json", op)
		}
	}
	for _, op := range documented {
		if !slices.Contains(registered, op) {
			t.Errorf("openapi.json documents %s, which Register does not mount", op)
		}
	}
}

// TestOpenAPIErrorCodes reads every error the package's code can answer
// (status and code, from its source) and checks that the document lists that
// status's code: tests need not reach every error path for its answer to be
// documented.
func TestOpenAPIErrorCodes(t *testing.T) {
	oa, err := openAPI()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepathGlobNonTest()
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?:apiError\{|writeError\(w, )http\.(Status\w+), "([a-z_]+)"`)
	bodyCode := regexp.MustCompile(`ErrorDetail\{Code: "([a-z_]+)"`)
	found := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			found++
			status, ok := statusByName[m[1]]
			if !ok {
				t.Errorf("%s: status %s is not in this test's table", f, m[1])
				continue
			}
			codes := errorCodes(t, oa.model, "Error"+strconv.Itoa(status))
			if !slices.Contains(codes, m[2]) {
				t.Errorf("%s: error %d %s is not listed in openapi.json's Error%d (%v)", f, status, m[2], status, codes)
			}
		}
		// Error bodies built directly (readiness) name no status beside
		// their code: at least the code must be a documented one.
		for _, m := range bodyCode.FindAllStringSubmatch(string(src), -1) {
			found++
			if all := enumOf(t, oa.model, "ErrorCode"); !slices.Contains(all, m[1]) {
				t.Errorf("%s: error code %s is not in openapi.json's ErrorCode (%v)", f, m[1], all)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d errors in the source; has the way they are written changed?", found)
	}
}

var statusByName = map[string]int{
	"StatusBadRequest": 400, "StatusUnauthorized": 401, "StatusForbidden": 403, "StatusNotFound": 404,
	"StatusMethodNotAllowed": 405, "StatusConflict": 409, "StatusRequestEntityTooLarge": 413,
	"StatusInternalServerError": 500, "StatusServiceUnavailable": 503,
}

func filepathGlobNonTest() ([]string, error) {
	all, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(f string) bool { return strings.HasSuffix(f, "_test.go") }), nil
}

// errorCodes returns the codes schema name allows (its enum or const).
func errorCodes(t *testing.T, m *v3.Document, name string) []string {
	t.Helper()
	proxy := m.Components.Schemas.GetOrZero(name)
	if proxy == nil {
		t.Fatalf("openapi.json has no schema %s", name)
	}
	errProp := proxy.Schema().Properties.GetOrZero("error")
	return values(errProp.Schema().Properties.GetOrZero("code").Schema())
}

// enumOf returns the values schema name allows.
func enumOf(t *testing.T, m *v3.Document, name string) []string {
	t.Helper()
	proxy := m.Components.Schemas.GetOrZero(name)
	if proxy == nil {
		t.Fatalf("openapi.json has no schema %s", name)
	}
	return values(proxy.Schema())
}

// values returns what a string schema's const or enum allows.
func values(code *base.Schema) []string {
	var out []string
	if code.Const != nil {
		out = append(out, code.Const.Value)
	}
	for _, n := range code.Enum {
		out = append(out, n.Value)
	}
	return out
}

// TestOpenAPIDocsCopy keeps docs/openapi.json the same document as the one
// served (a symlink to it; a copy that drifted would mislead readers).
func TestOpenAPIDocsCopy(t *testing.T) {
	b, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, openAPIDocument) {
		t.Fatal("docs/openapi.json differs from httpapi/openapi.json; make it a symlink to it again")
	}
}

// TestOpenAPIValidationBites shows the validating wrapper failing on what a
// drift would look like, so that a silent wrapper cannot pass for a check.
func TestOpenAPIValidationBites(t *testing.T) {
	check := func(method, path, reqBody string, status int, header http.Header, respBody string) []string {
		r := httptest.NewRequest(method, path, strings.NewReader(reqBody))
		r.Header.Set("X-API-Key", "k")
		rec := httptest.NewRecorder()
		for k, v := range header {
			rec.Header()[k] = v
		}
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(status)
		rec.WriteString(respBody)
		return checkExchange(r, []byte(reqBody), rec.Result())
	}
	decision := `{"allowed":true,"rule":null,"limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"degraded":false,"shadow":false,"limits":[]}`
	okReq := `{"route":"/a"}`
	if p := check("POST", "/v1/check", okReq, 200, nil, decision); len(p) > 0 {
		t.Fatalf("a valid exchange fails: %v", p)
	}
	for _, c := range []struct {
		name, method, path, req string
		status                  int
		header                  http.Header
		resp                    string
	}{
		{"field_omitted", "POST", "/v1/check", okReq, 200, nil, strings.Replace(decision, `,"shadow":false`, "", 1)},
		{"field_added", "POST", "/v1/check", okReq, 200, nil, strings.Replace(decision, `{`, `{"extra":1,`, 1)},
		{"undocumented_status", "POST", "/v1/check", okReq, 418, nil, `{"error":{"code":"internal","message":"x"}}`},
		{"code_of_another_status", "POST", "/v1/check", okReq, 400, nil, `{"error":{"code":"not_found","message":"x"}}`},
		{"429_without_retry_after", "POST", "/v1/check", okReq, 429, nil, decision},
		{"doc_refuses_what_server_took", "POST", "/v1/check", `{"route":"a"}`, 200, nil, decision},
		{"unknown_path_not_404", "GET", "/v1/nowhere", "", 200, nil, `{}`},
		{"405_without_allow", "GET", "/v1/check", "", 405, nil, `{"error":{"code":"method_not_allowed","message":"x"}}`},
	} {
		if p := check(c.method, c.path, c.req, c.status, c.header, c.resp); len(p) == 0 {
			t.Errorf("%s: the wrapper passes it", c.name)
		} else {
			t.Logf("%s: %s", c.name, strings.Join(p, "; "))
		}
	}
}
