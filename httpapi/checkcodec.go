package httpapi

// A hand-written codec for the check path, the only endpoint hot enough for
// encoding/json's reflection to show in profiles.
//
// Decoding has a fast path for the shape clients send and no error handling
// of its own: on anything it does not fully understand (an error, an escaped
// field name, an unusual number, anything the strict rules refuse) it gives
// up and the body it already read goes to decodeBytes, the path every other
// endpoint uses: the strict rules (strict.go), then encoding/json. Accepting
// and rejecting therefore cannot drift from that path, and neither can the
// error messages. Encoding has no fallback: it writes the same bytes as
// writeJSON(checkapi.NewDecision(...)), which the tests and the fuzz test compare.

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicelabs/sluice"
	"github.com/sluicelabs/sluice/checkapi"
)

// Pooled buffers: small enough that a typical check body and its answer fit
// without growing, and bounded so one 64 KiB body does not stay pinned.
const (
	checkBufferBytes     = 1 << 10
	maxPooledCheckBuffer = 16 << 10
)

var checkBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, checkBufferBytes)
	return &b
}}

// getCheckBuffer returns an empty buffer for readCheckRequest or
// appendDecisionJSON; give it back with putCheckBuffer.
func getCheckBuffer() *[]byte {
	return checkBuffers.Get().(*[]byte)
}

// putCheckBuffer returns a buffer to the pool. Nothing may use *bp after.
func putCheckBuffer(bp *[]byte) {
	if cap(*bp) > maxPooledCheckBuffer {
		return
	}
	*bp = (*bp)[:0]
	checkBuffers.Put(bp)
}

// readCheckRequest reads and decodes the body of POST /v1/check, like
// decodeBody(w, r, &req) but reading the body once into buf (appending from
// its start, so its contents are overwritten) and parsing the common shape
// by hand. It returns the buffer, perhaps grown, for the caller to give back
// to the pool; the request's strings do not refer to it, so that can be
// right away. The caller still validates the request (validateCheck).
//
// Typical use:
//
//	bp := getCheckBuffer()
//	req, body, aerr := readCheckRequest(w, r, *bp)
//	*bp = body
//	putCheckBuffer(bp)
func readCheckRequest(w http.ResponseWriter, r *http.Request, buf []byte) (checkapi.Request, []byte, *apiError) {
	body, err := readBody(w, r, buf[:0])
	if err != nil {
		return checkapi.Request{}, body, bodyReadError(err)
	}
	// The spare capacity after the body is scratch space for unescaping.
	if req, ok := parseCheckFast(body, body[len(body):]); ok {
		return req, body, nil
	}
	var req checkapi.Request
	if aerr := decodeBytes(body, &req); aerr != nil {
		return checkapi.Request{}, body, aerr
	}
	return req, body, nil
}

// readBody appends r's body to buf like io.ReadAll(http.MaxBytesReader(w,
// r.Body, MaxBodyBytes)) does to a fresh slice. The MaxBytesReader is kept
// for what it does beyond counting: on a body too large it tells the server
// to close the connection instead of reading the rest.
func readBody(w http.ResponseWriter, r *http.Request, buf []byte) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= MaxBodyBytes {
		// One byte more than the body, so the read that sees EOF needs no growth.
		buf = slices.Grow(buf, int(n)+1)
	}
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // let append pick the growth
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// Fields of checkapi.Request, as parseCheckFast tells them apart.
const (
	fieldUnknown = iota
	fieldRoute
	fieldSubject
	fieldCost
	fieldPlan
)

// parseCheckFast parses a check body of the common shape: one object whose
// members are route, subject, plan (strings or null) and cost (an integer or null),
// each at most once, names exactly so, any JSON whitespace, any string
// escapes but \u0000 and unpaired surrogates, valid UTF-8. ok is false for
// anything else, errors included; whatever it accepts, decodeBytes (the
// strict rules and encoding/json) accepts with the same values. Strings with
// escapes are unescaped into scratch, whose spare capacity is used before
// anything is allocated.
func parseCheckFast(b, scratch []byte) (req checkapi.Request, ok bool) {
	// The strings' last values, in b or in scratch: both become one string,
	// one allocation.
	var route, subject, plan []byte
	var cost int64
	hasCost := false
	var seen [fieldPlan + 1]bool // a duplicate is for decodeBytes to refuse

	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return req, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			field, next, ok := parseFieldName(b, i)
			if !ok || seen[field] {
				return req, false
			}
			seen[field] = true
			i = skipSpace(b, next)
			if i >= len(b) || b[i] != ':' {
				return req, false
			}
			i = skipSpace(b, i+1)
			if i >= len(b) {
				return req, false
			}
			switch {
			case b[i] == 'n':
				if len(b)-i < 4 || string(b[i:i+4]) != "null" {
					return req, false
				}
				i += 4 // each field is seen once: null leaves it absent
			case field == fieldCost:
				if cost, i, ok = parseInt64(b, i); !ok {
					return req, false
				}
				hasCost = true
			case b[i] == '"':
				var s []byte
				if s, scratch, i, ok = parseString(b, i, scratch); !ok {
					return req, false
				}
				switch field {
				case fieldRoute:
					route = s
				case fieldSubject:
					subject = s
				default:
					plan = s
				}
			default:
				return req, false
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return req, false
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return req, false
			}
			i = skipSpace(b, i+1)
		}
	}
	if skipSpace(b, i) != len(b) {
		return req, false
	}

	if n := len(route) + len(subject) + len(plan); n > 0 {
		var all strings.Builder
		all.Grow(n)
		all.Write(route)
		all.Write(subject)
		all.Write(plan)
		s := all.String()
		req.Route, req.Subject, req.Plan = s[:len(route)], s[len(route):len(route)+len(subject)], s[len(route)+len(subject):]
	}
	if hasCost {
		req.Cost = &cost
	}
	return req, true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// parseFieldName parses the quoted member name at b[i]. Only unescaped names
// spelt exactly as the fields are handled; anything else (an unknown name,
// one in another case) is an error or an escape, left to decodeBytes.
func parseFieldName(b []byte, i int) (field, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return fieldUnknown, i, false
	}
	start := i + 1
	end := start
	for ; end < len(b) && b[end] != '"'; end++ {
		if c := b[end]; c == '\\' || c < ' ' || c >= utf8.RuneSelf {
			return fieldUnknown, i, false
		}
	}
	if end >= len(b) {
		return fieldUnknown, i, false
	}
	name := b[start:end]
	switch string(name) { // no allocation: the compiler compares in place
	case "route":
		field = fieldRoute
	case "subject":
		field = fieldSubject
	case "cost":
		field = fieldCost
	case "plan":
		field = fieldPlan
	default:
		return fieldUnknown, i, false
	}
	return field, end + 1, true
}

// parseInt64 parses the JSON integer at b[i] if it fits an int64. A fraction
// or an exponent is left for the caller to find (and reject) as the byte
// after it, as is a digit after a leading zero.
func parseInt64(b []byte, i int) (v int64, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	if i < len(b) && b[i] == '0' {
		i++
	} else {
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	// At most 19 digits: the uint64 cannot overflow below.
	if i == start || i-start > 19 {
		return 0, i, false
	}
	var u uint64
	for _, c := range b[start:i] {
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, i, false
		}
		return -int64(u), i, true // 1<<63 wraps to math.MinInt64, as wanted
	}
	if u > 1<<63-1 {
		return 0, i, false
	}
	return int64(u), i, true
}

// parseString returns the value of the JSON string at b[i]: a slice of b if
// it holds no escapes, else its unescaped value appended to scratch. ok is
// false for invalid UTF-8, \u0000 and unpaired surrogates too.
func parseString(b []byte, i int, scratch []byte) (s, scratchOut []byte, next int, ok bool) {
	start := i + 1
	for j := start; j < len(b); {
		c := b[j]
		if c == '"' {
			return b[start:j], scratch, j + 1, true
		}
		if c < ' ' || c == '\\' {
			break
		}
		if c < utf8.RuneSelf {
			j++
			continue
		}
		r, size := utf8.DecodeRune(b[j:])
		if r == utf8.RuneError && size == 1 {
			return nil, scratch, j, false
		}
		j += size
	}
	n := len(scratch)
	scratch, next, ok = appendUnquoted(scratch, b, i)
	return scratch[n:], scratch, next, ok
}

// appendUnquoted appends the value of the JSON string at b[i] to dst as
// encoding/json decodes it: escapes resolved. ok is false if the string is
// not valid JSON or breaks a strict rule: invalid UTF-8, a \u0000, a \u
// escape that is half a surrogate pair (which encoding/json would replace
// with U+FFFD, merging distinct subjects).
func appendUnquoted(dst, b []byte, i int) (out []byte, next int, ok bool) {
	i++ // the opening quote
	for {
		start := i
		for i < len(b) {
			if c := b[i]; c < ' ' || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			i++
		}
		dst = append(dst, b[start:i]...)
		if i >= len(b) {
			return dst, i, false
		}
		switch c := b[i]; {
		case c == '"':
			return dst, i + 1, true
		case c < ' ':
			return dst, i, false
		case c == '\\':
			if i+1 >= len(b) {
				return dst, i, false
			}
			switch b[i+1] {
			case '"', '\\', '/':
				dst = append(dst, b[i+1])
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(b, i)
				if r <= 0 { // not an escape, or a NUL
					return dst, i, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					// Only a valid pair is a rune.
					dec := utf16.DecodeRune(r, hex4(b, i))
					if dec == utf8.RuneError {
						return dst, i, false
					}
					dst = utf8.AppendRune(dst, dec)
					i += 6
					continue
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, i, false
			}
			i += 2
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, i, false
			}
			dst = append(dst, b[i:i+size]...)
			i += size
		}
	}
}

// hex4 returns the rune of the \uXXXX escape at b[i], or -1 if there is none.
func hex4(b []byte, i int) rune {
	if len(b)-i < 6 || b[i] != '\\' || b[i+1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// writeDecision writes a check's answer like writeJSON(w, status,
// checkapi.NewDecision(rule, d, shadow)), the same bytes and headers, from a
// pooled buffer.
// choice is the plan and the override whose limits a check was decided
// under ("" for none), as the engine's Result names them.
type choice struct{ plan, override string }

func writeDecision(w http.ResponseWriter, status int, rule string, d sluice.Decision, shadow bool, chose choice) {
	bp := getCheckBuffer()
	*bp = appendDecisionJSON((*bp)[:0], rule, d, shadow, chose)
	setJSONHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(*bp) // Write must not keep *bp (io.Writer), so it can go back
	putCheckBuffer(bp)
}

// appendDecisionJSON appends the bytes a json.Encoder with SetEscapeHTML(false)
// writes for checkapi.NewDecision(rule, d, shadow), trailing newline
// included. The field order and the zeros always written are
// checkapi.Decision's.
func appendDecisionJSON(b []byte, rule string, d sluice.Decision, shadow bool, chose choice) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed) // the engine's answer: a shadow rule's deny is an allow
	b = append(b, `,"rule":`...)
	if rule == "" {
		b = append(b, "null"...)
	} else {
		b = appendQuoted(b, rule)
	}
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, sluice.CeilMilliseconds(d.ResetAfter), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, sluice.CeilMilliseconds(d.RetryAfter), 10)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, d.Degraded)
	b = append(b, `,"shadow":`...)
	b = strconv.AppendBool(b, shadow)
	b = append(b, `,"limits":[`...)
	for k, ld := range d.Limits {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendQuoted(b, ld.Name)
		b = append(b, `,"algorithm":`...)
		b = appendQuoted(b, string(ld.Algorithm))
		b = append(b, `,"limit":`...)
		b = strconv.AppendInt(b, ld.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, ld.Remaining, 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, sluice.CeilMilliseconds(ld.ResetAfter), 10)
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, sluice.CeilMilliseconds(ld.RetryAfter), 10)
		b = append(b, '}')
	}
	b = append(b, ']')
	if chose.plan != "" {
		b = append(b, `,"plan":`...)
		b = appendQuoted(b, chose.plan)
	}
	if chose.override != "" {
		b = append(b, `,"override":`...)
		b = appendQuoted(b, chose.override)
	}
	if d.Hold != nil {
		b = append(b, `,"hold":{"id":`...)
		b = appendQuoted(b, d.Hold.ID)
		b = append(b, `,"expires_in_ms":`...)
		b = strconv.AppendInt(b, d.Hold.ExpiresIn.Milliseconds(), 10)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

const lowerHex = "0123456789abcdef"

// appendQuoted appends s as a JSON string exactly as encoding/json does
// without HTML escaping: the short escapes it uses, \u00XX for other control
// bytes, U+FFFD for each byte of invalid UTF-8, and U+2028 and U+2029 escaped
// because JavaScript (JSONP) treats them as line ends.
func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', lowerHex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
