package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/check"
	"github.com/sluicelabs/sluice/checkapi"
)

// MaxBodyBytes bounds every request body; larger ones get 413.
const MaxBodyBytes = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types are encoded; this is a programming error.
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"The answer could not be encoded."}}` + "\n")
	}
	setJSONHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// Shared header values: net/http never modifies a value slice, and reusing
// them saves two allocations per answer.
var (
	contentTypeJSON = []string{"application/json"}
	cacheNoStore    = []string{"no-store"}
)

func setJSONHeaders(h http.Header) {
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = cacheNoStore
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, checkapi.ErrorBody{Error: checkapi.ErrorDetail{Code: code, Message: message}})
}

// apiError is an error with the status and code it is answered with.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request", fmt.Sprintf(format, args...)}
}

// decodeBody reads r's JSON body into v: at most MaxBodyBytes, one JSON
// value, no unknown fields, and the strict rules (see strictJSON). Errors are *apiError with a sentence saying what
// is wrong.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return bodyReadError(err)
	}
	return decodeBytes(body, v)
}

// bodyReadError explains an error from reading a body bounded by
// MaxBodyBytes.
func bodyReadError(err error) *apiError {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &apiError{http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("The request body is larger than %d KiB.", MaxBodyBytes>>10)}
	}
	return badRequest("The request body could not be read.")
}

// decodeBytes is decodeBody on a body already read: the check codec falls
// back to it for whatever its fast parser does not handle.
func decodeBytes(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return &apiError{http.StatusBadRequest, "malformed_json", "The request body is empty; a JSON object is required."}
	}
	if aerr := strictJSON(body, v); aerr != nil {
		return aerr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return &apiError{http.StatusBadRequest, "malformed_json", "The request body holds more than one JSON value."}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &apiError{http.StatusBadRequest, "malformed_json", "The request body holds data after its JSON object."}
	}
	return nil
}

// jsonError explains a decoding error in a sentence.
func jsonError(err error) *apiError {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return &apiError{http.StatusBadRequest, "malformed_json", fmt.Sprintf("The request body is not valid JSON (at byte %d).", syntax.Offset)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{http.StatusBadRequest, "malformed_json", "The request body is not valid JSON: it ends too early."}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return &apiError{http.StatusBadRequest, "malformed_json", fmt.Sprintf("The request body must be a JSON object, not %s.", typeErr.Value)}
		}
		return badRequest("Field %q must be %s, not %s.", field, describeType(typeErr), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &apiError{http.StatusBadRequest, "unknown_field", fmt.Sprintf("The request body has an unknown field %s.", strings.TrimPrefix(err.Error(), "json: unknown field "))}
	}
	var bad *badFieldError
	if errors.As(err, &bad) {
		return badRequest("%s", bad.msg)
	}
	if errors.Is(err, sluice.ErrInvalid) { // a wire type's decoder refused a value (adminapi.Subjects)
		return badRequest("%s", sentence(err.Error()))
	}
	return &apiError{http.StatusBadRequest, "malformed_json", "The request body is not valid JSON: " + err.Error() + "."}
}

func describeType(e *json.UnmarshalTypeError) string {
	switch e.Type.Kind().String() {
	case "int", "int64", "int32", "uint", "uint64":
		return "a whole number"
	case "float64", "float32":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice":
		return "a list"
	case "struct", "map":
		return "an object"
	}
	return "of type " + e.Type.String()
}

// badFieldError is returned by custom decoders for a value they reject.
type badFieldError struct{ msg string }

func (e *badFieldError) Error() string { return e.msg }

// errorFor maps an error from the catalog, the store or the check engine to
// its answer: the one place errors become status codes. An error it does not
// know is a 500; a face that knows better (a failed store call) says so with
// unavailable (see failEngine).
func errorFor(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, sluice.ErrInvalid):
		return badRequest("%s", sentence(err.Error()))
	case errors.Is(err, sluice.ErrNotFound):
		return &apiError{http.StatusNotFound, "not_found", sentence(err.Error())}
	case errors.Is(err, sluice.ErrTenantCap):
		// 409 rather than 422: the request is valid and conflicts with the
		// tenant's current state, and succeeds once a rule or key is
		// deleted (RFC 9110 15.5.10), like a name already taken.
		return &apiError{http.StatusConflict, "tenant_cap_reached", sentence(err.Error())}
	case errors.Is(err, sluice.ErrConflict):
		return &apiError{http.StatusConflict, "conflict", sentence(err.Error())}
	case errors.Is(err, check.ErrOverloaded):
		return errOverloaded
	case errors.Is(err, sluice.ErrStoreFull):
		return errStoreFull
	case errors.Is(err, sluice.ErrStoreUnavailable):
		return errStoreUnavailable
	case errors.Is(err, sluice.ErrCatalogReadOnly):
		return errCatalogReadOnly
	case catalogUnavailable(err):
		return &apiError{http.StatusServiceUnavailable, "catalog_unavailable", msgCatalogUnavailable}
	}
	return errInternal
}

var (
	errOverloaded = &apiError{http.StatusServiceUnavailable, "overloaded",
		"This Sluice instance is past its capacity and sheds checks; retry shortly."}
	errStoreUnavailable = &apiError{http.StatusServiceUnavailable, "store_unavailable",
		"The rate-limit store is unavailable; retry shortly."}
	// errStoreFull is the memory store at its budgets: the rule's failure
	// mode answered, and it fails closed.
	errStoreFull = &apiError{http.StatusServiceUnavailable, "store_full",
		"The rate-limit store has no room for a new counter (this tenant's budget of live counters, or the store's, is taken) and this rule fails closed; subjects already counted are still decided. Retry shortly."}
	// errCatalogReadOnly is a change the database refused: nothing was made.
	errCatalogReadOnly = &apiError{http.StatusServiceUnavailable, "catalog_unavailable",
		"The catalog database is read-only, so changes cannot be saved until it can write again; nothing was changed. Reads and checks still work."}
	errInternal = &apiError{http.StatusInternalServerError, "internal", "The server could not complete the request; see its log."}
)

const msgCatalogUnavailable = "The catalog database is unavailable or did not answer in time; retry shortly."

// catalogUnavailable reports whether err says the catalog database could not
// be reached or did not answer, rather than that the call was wrong. The
// catalogs return their drivers' errors, so this looks for what they wrap:
// the admin deadline, a network error (refused, reset, unreachable, DNS), or
// a PostgreSQL SQLSTATE of class 08 (connection), 53 (insufficient
// resources, e.g. too many connections) or 57P01-57P03 (shutting down,
// starting up), read through the SQLState method of pgconn.PgError so that
// this package need not import the driver.
func catalogUnavailable(err error) bool {
	var netErr net.Error
	var state interface{ SQLState() string }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	case errors.As(err, &state):
		code := state.SQLState()
		return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") ||
			code == "57P01" || code == "57P02" || code == "57P03"
	}
	return false
}

// sentence capitalises msg and ends it with a period.
func sentence(msg string) string {
	if msg == "" {
		return msg
	}
	msg = strings.ToUpper(msg[:1]) + msg[1:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
