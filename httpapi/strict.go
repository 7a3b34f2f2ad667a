package httpapi

// Strict JSON: the rules every request body of the API follows on top of
// encoding/json. encoding/json matches field names case-insensitively
// ("ROUTE" sets route), lets a later duplicate override an earlier one, and
// replaces invalid UTF-8 and unpaired surrogate escapes with U+FFFD, so two
// distinct byte strings can decode to one subject and share its bucket.
// PostgreSQL cannot store a NUL in text either. Every body is therefore
// walked once with encoding/json's own tokenizer before it is decoded, and
// refused with a 400 naming the field if:
//
//   - a field name differs only in case from a field of the request
//     (unknown_field: names are exact);
//   - a field appears twice in one object (duplicate_field);
//   - a string (name or value) holds invalid UTF-8 or an unpaired
//     surrogate escape, or a NUL (\u0000) (invalid_request).
//
// Syntax errors are left to encoding/json, whose messages stay as they were.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonSchema is what strictJSON knows of a request type: the exact field
// names of a struct, or the element of a list. nil means any value (a map,
// an interface, a scalar): only its strings and duplicates are checked.
type jsonSchema struct {
	fields map[string]*jsonSchema
	elem   *jsonSchema
}

var (
	schemas         sync.Map // reflect.Type -> *jsonSchema
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// schemaFor returns the schema of the type v points to, built once per type.
func schemaFor(v any) *jsonSchema {
	t := reflect.TypeOf(v)
	if s, ok := schemas.Load(t); ok {
		return s.(*jsonSchema)
	}
	s := buildSchema(t)
	schemas.Store(t, s)
	return s
}

// buildSchema follows pointers, structs and lists; request types are not
// recursive, so it needs no cycle guard.
func buildSchema(t reflect.Type) *jsonSchema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil // decodes itself: its shape is its own business
		}
		s := &jsonSchema{fields: map[string]*jsonSchema{}}
		for f := range t.Fields() {
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			s.fields[name] = buildSchema(f.Type)
		}
		return s
	case reflect.Slice, reflect.Array:
		if elem := buildSchema(t.Elem()); elem != nil {
			return &jsonSchema{elem: elem}
		}
	}
	return nil
}

// strictJSON checks body against the strict rules for a value decoded into
// v. It returns nil if body breaks none of them, or has a syntax error
// (encoding/json explains those); only the first JSON value is walked.
func strictJSON(body []byte, v any) *apiError {
	w := strictWalker{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	w.dec.UseNumber() // numbers are not the walker's concern: no float parsing
	if err := w.value(schemaFor(v), ""); err != nil {
		return nil // a syntax error: decoding reports it
	}
	return w.first
}

type strictWalker struct {
	dec   *json.Decoder
	body  []byte
	first *apiError // the first rule broken; the walk goes on to find syntax errors
}

func (w *strictWalker) fail(e *apiError) {
	if w.first == nil {
		w.first = e
	}
}

// token reads the next token and, for a string, checks its raw literal.
func (w *strictWalker) token(path string, isName bool) (json.Token, error) {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, err
	}
	if _, ok := tok.(string); ok {
		// Between the two offsets: whitespace, perhaps a ',' or ':', then
		// the string literal, which is the only part holding a quote.
		raw := w.body[start:w.dec.InputOffset()]
		if problem := stringProblem(raw[bytes.IndexByte(raw, '"'):]); problem != "" {
			if isName {
				w.fail(badRequest("A field name in the request body %s.", problem))
			} else {
				w.fail(badRequest("Field %q %s.", path, problem))
			}
		}
	}
	return tok, nil
}

func (w *strictWalker) value(s *jsonSchema, path string) error {
	tok, err := w.token(path, false)
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var seen map[string]bool
		for w.dec.More() {
			tok, err := w.token(path, true)
			if err != nil {
				return err
			}
			name := tok.(string)
			field := name
			if path != "" {
				field = path + "." + name
			}
			if seen[name] {
				w.fail(&apiError{http.StatusBadRequest, "duplicate_field",
					fmt.Sprintf("Field %q appears more than once; give each field once.", field)})
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[name] = true
			var child *jsonSchema
			if s != nil && s.fields != nil {
				if c, ok := s.fields[name]; ok {
					child = c
				} else if known := s.fold(name); known != "" {
					w.fail(&apiError{http.StatusBadRequest, "unknown_field", fmt.Sprintf(
						"The request body has an unknown field %q; field names are case-sensitive (did you mean %q?).", field, known)})
				}
				// Other unknown names are encoding/json's to refuse.
			}
			if err := w.value(child, field); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // '}'
		return err
	case json.Delim('['):
		var elem *jsonSchema
		if s != nil {
			elem = s.elem
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ']'
		return err
	}
	return nil
}

// fold returns the field name that name matches ignoring case, as
// encoding/json would match it, or "".
func (s *jsonSchema) fold(name string) string {
	for known := range s.fields {
		if strings.EqualFold(known, name) {
			return known
		}
	}
	return ""
}

// stringProblem says what is wrong with a JSON string literal (quotes
// included, syntax already checked by the tokenizer) under the strict rules,
// as the end of a sentence, or returns "".
func stringProblem(lit []byte) string {
	for i := 1; i < len(lit)-1; {
		c := lit[i]
		switch {
		case c == '\\':
			if lit[i+1] != 'u' {
				i += 2
				continue
			}
			r := hex4(lit, i)
			switch {
			case r == 0:
				return "contains a NUL character (\\u0000), which is not allowed"
			case utf16.IsSurrogate(r):
				if r < 0xdc00 { // a high half: a low one must follow
					if lo := hex4(lit, i+6); 0xdc00 <= lo && lo <= 0xdfff {
						i += 12
						continue
					}
				}
				return "is not valid Unicode: it holds an unpaired surrogate escape (\\ud800-\\udfff)"
			}
			i += 6
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(lit[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Sprintf("is not valid UTF-8 (byte 0x%02x); send text, and encode binary values (base64, say)", c)
			}
			i += size
		}
	}
	return ""
}

// validText checks a value that did not come through JSON (a path segment)
// by the same rules: valid UTF-8, no NUL, at most max bytes.
func validText(what, s string, max int) *apiError {
	switch {
	case len(s) > max:
		return badRequest("The %s is %d bytes long; at most %d are allowed.", what, len(s), max)
	case !utf8.ValidString(s):
		return badRequest("The %s is not valid UTF-8; send text, and encode binary values (base64, say).", what)
	case strings.IndexByte(s, 0) >= 0:
		return badRequest("The %s contains a NUL character, which is not allowed.", what)
	}
	return nil
}
