package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The fast check accepts a predict body straight from its bytes when it can
// tell, without building a document, that decodeRequest and the schema would
// both accept it. It only ever says "valid": whenever it is unsure (an
// escaped string, a duplicate key, a number on a bound, a row of feature
// values, a keyword it does not know) it declines, and the request takes the
// full path (decodeRequest, then the compiled schema), which finds and words
// the failure exactly as before. Only the schema's common keywords are
// understood; a schema with any other is never checked here.
//
// Decoding the body into a document for the schema library was half of the
// gateway's allocations per request (bench gateway, docs/gateway.md).

// fastNode is one schema (sub)schema the fast check understands.
type fastNode struct {
	// typ is the required JSON type: 0 for any, else 'o'bject, 'a'rray,
	// 's'tring, 'n'umber, 'i'nteger, 'b'oolean or 'z' (null).
	typ byte
	// Objects: keys are the properties and required names, props their
	// schemas (nil for a required name without one), required a bit per
	// key, closed set by additionalProperties false.
	keys     []string
	props    []*fastNode
	required uint64
	closed   bool
	// Arrays.
	items              *fastNode
	minItems, maxItems int // -1 when absent
	// Numbers.
	min, max, xmin, xmax bound
	// Strings: lengths in characters, -1 when absent; enum the allowed
	// values when the schema has an enum (all strings).
	minLen, maxLen int
	enum           []string
}

// bound is a numeric bound of a schema: set when present, exact when its
// float64 is the number itself (an integer of at most 15 digits).
type bound struct {
	set, exact bool
	v          float64
}

// maxFastKeys is how many properties an object schema may name for the
// fast check (one bit each in required and seen).
const maxFastKeys = 64

// compileFast returns the fast check of a schema, nil when it uses anything
// the fast check does not understand.
func compileFast(raw json.RawMessage) *fastNode {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var doc map[string]any
	if d.Decode(&doc) != nil {
		return nil
	}
	return fastOf(doc)
}

// annotations are keywords that assert nothing.
var annotations = map[string]bool{"title": true, "description": true, "$comment": true, "default": true, "examples": true,
	"$schema": true, "deprecated": true, "readOnly": true, "writeOnly": true}

func fastOf(m map[string]any) *fastNode {
	n := &fastNode{minItems: -1, maxItems: -1, minLen: -1, maxLen: -1}
	var props map[string]any
	var required []any
	for k, v := range m {
		ok := true
		switch k {
		case "type":
			n.typ, ok = fastType(v)
		case "properties":
			props, ok = v.(map[string]any)
		case "required":
			required, ok = v.([]any)
		case "additionalProperties":
			var b bool
			b, ok = v.(bool)
			n.closed = ok && !b
		case "items":
			s, isMap := v.(map[string]any)
			if ok = isMap; ok {
				n.items = fastOf(s)
				ok = n.items != nil
			}
		case "minItems":
			n.minItems, ok = count(v)
		case "maxItems":
			n.maxItems, ok = count(v)
		case "minLength":
			n.minLen, ok = count(v)
		case "maxLength":
			n.maxLen, ok = count(v)
		case "minimum":
			n.min, ok = boundOf(v)
		case "maximum":
			n.max, ok = boundOf(v)
		case "exclusiveMinimum":
			n.xmin, ok = boundOf(v)
		case "exclusiveMaximum":
			n.xmax, ok = boundOf(v)
		case "enum":
			vals, isList := v.([]any)
			if ok = isList && len(vals) > 0; ok {
				n.enum = make([]string, 0, len(vals))
				for _, e := range vals {
					s, isString := e.(string)
					if ok = ok && isString; ok {
						n.enum = append(n.enum, s)
					}
				}
			}
		default:
			ok = annotations[k]
		}
		if !ok {
			return nil
		}
	}
	for name, s := range props {
		sm, ok := s.(map[string]any)
		if !ok {
			return nil
		}
		p := fastOf(sm)
		if p == nil {
			return nil
		}
		n.keys, n.props = append(n.keys, name), append(n.props, p)
	}
	for _, r := range required {
		name, ok := r.(string)
		if !ok {
			return nil
		}
		i := indexOf(n.keys, name)
		if i < 0 {
			n.keys, n.props = append(n.keys, name), append(n.props, nil)
			i = len(n.keys) - 1
		}
		if i >= maxFastKeys {
			return nil
		}
		n.required |= 1 << i
	}
	if len(n.keys) > maxFastKeys {
		return nil
	}
	return n
}

func fastType(v any) (byte, bool) {
	s, _ := v.(string)
	switch s {
	case "object", "array", "string", "number", "integer", "boolean":
		return s[0], true
	case "null":
		return 'z', true
	}
	return 0, false
}

func count(v any) (int, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(num))
	return n, err == nil && n >= 0
}

func boundOf(v any) (bound, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return bound{}, false
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return bound{}, false
	}
	return bound{set: true, exact: exactInt([]byte(num)), v: f}, true
}

// exactInt reports whether the number text b is an integer whose float64
// is itself: no fraction or exponent, at most 15 digits.
func exactInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 15 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func indexOf(keys []string, name string) int {
	for i, k := range keys {
		if k == name {
			return i
		}
	}
	return -1
}

// acceptPredict reports whether body is a predict request that
// decodeRequest accepts and whose every instance n accepts (nil: any
// instance); false means "not sure", never "invalid".
func acceptPredict(body []byte, n *fastNode) bool {
	if !json.Valid(body) {
		return false
	}
	// From here the body is valid JSON, which the scanning relies on.
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return false
	}
	seen := false
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		key, next, esc := scanString(body, i)
		i = skipSpace(body, skipSpace(body, next)+1) // past the colon
		switch {
		case esc:
			return false
		case string(key) == "instances":
			if seen || body[i] != '[' {
				return false
			}
			seen = true
			var ok bool
			if i, ok = acceptInstances(body, i, n); !ok {
				return false
			}
		case bytes.EqualFold(key, []byte("instances")):
			// encoding/json matches field names without case.
			return false
		default:
			i = skipValue(body, i)
		}
		i = skipSpace(body, i)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return seen
}

// acceptInstances checks the array of instances at body[i] and returns
// where it ends; it must hold at least one instance, and rows (arrays of
// feature values) are left to the full path.
func acceptInstances(body []byte, i int, n *fastNode) (int, bool) {
	i = skipSpace(body, i+1)
	if body[i] == ']' {
		return 0, false
	}
	for {
		if body[i] == '[' {
			return 0, false
		}
		var ok bool
		if i, ok = n.accept(body, i); !ok {
			return 0, false
		}
		i = skipSpace(body, i)
		if body[i] == ']' {
			return i + 1, true
		}
		i = skipSpace(body, i+1)
	}
}

// accept checks the value at body[i] against n (nil accepts any) and
// returns where the value ends.
func (n *fastNode) accept(body []byte, i int) (int, bool) {
	if n == nil {
		return skipValue(body, i), true
	}
	switch c := body[i]; {
	case c == '{':
		if n.typ != 0 && n.typ != 'o' || n.enum != nil {
			return 0, false
		}
		return n.acceptObject(body, i)
	case c == '[':
		if n.typ != 0 && n.typ != 'a' || n.enum != nil {
			return 0, false
		}
		return n.acceptArray(body, i)
	case c == '"':
		if n.typ != 0 && n.typ != 's' {
			return 0, false
		}
		s, next, esc := scanString(body, i)
		return next, !esc && n.acceptString(s)
	case c == 't' || c == 'f':
		end := i + 4
		if c == 'f' {
			end++
		}
		return end, (n.typ == 0 || n.typ == 'b') && n.enum == nil
	case c == 'n':
		return i + 4, (n.typ == 0 || n.typ == 'z') && n.enum == nil
	default:
		end := scanNumber(body, i)
		return end, n.enum == nil && n.acceptNumber(body[i:end])
	}
}

func (n *fastNode) acceptObject(body []byte, i int) (int, bool) {
	var seen uint64
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		key, next, esc := scanString(body, i)
		if esc {
			return 0, false
		}
		i = skipSpace(body, skipSpace(body, next)+1)
		k := -1
		for j, name := range n.keys {
			if string(key) == name {
				k = j
				break
			}
		}
		var ok bool
		switch {
		case k < 0 && n.closed:
			return 0, false
		case k < 0 || n.props[k] == nil:
			i, ok = skipValue(body, i), true
		default:
			i, ok = n.props[k].accept(body, i)
		}
		if !ok {
			return 0, false
		}
		if k >= 0 {
			if seen&(1<<k) != 0 {
				return 0, false // a duplicate: the last one counts, leave it to the full path
			}
			seen |= 1 << k
		}
		i = skipSpace(body, i)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return i + 1, seen&n.required == n.required
}

func (n *fastNode) acceptArray(body []byte, i int) (int, bool) {
	items := 0
	i = skipSpace(body, i+1)
	for body[i] != ']' {
		var ok bool
		if i, ok = n.items.accept(body, i); !ok {
			return 0, false
		}
		items++
		i = skipSpace(body, i)
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
	}
	return i + 1, (n.minItems < 0 || items >= n.minItems) && (n.maxItems < 0 || items <= n.maxItems)
}

// acceptString checks an unescaped string's content s.
func (n *fastNode) acceptString(s []byte) bool {
	if n.minLen >= 0 || n.maxLen >= 0 {
		if !utf8.Valid(s) {
			return false
		}
		l := utf8.RuneCount(s)
		if n.minLen >= 0 && l < n.minLen || n.maxLen >= 0 && l > n.maxLen {
			return false
		}
	}
	if n.enum == nil {
		return true
	}
	for _, e := range n.enum {
		if string(s) == e {
			return true
		}
	}
	return false
}

// acceptNumber checks the number text b. A value on a bound, or one whose
// float64 could be on either side of it, is left to the full path, which
// compares exactly.
func (n *fastNode) acceptNumber(b []byte) bool {
	if n.typ != 0 && n.typ != 'n' && n.typ != 'i' {
		return false
	}
	if n.typ == 'i' && bytes.ContainsAny(b, ".eE") {
		return false
	}
	if !n.min.set && !n.max.set && !n.xmin.set && !n.xmax.set {
		return true
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return false
	}
	exact := exactInt(b)
	above := func(m bound, orEqual bool) bool {
		return !m.set || v > m.v || orEqual && v == m.v && exact && m.exact
	}
	below := func(m bound, orEqual bool) bool {
		return !m.set || v < m.v || orEqual && v == m.v && exact && m.exact
	}
	return above(n.min, true) && below(n.max, true) && above(n.xmin, false) && below(n.xmax, false)
}

// The scanners below read valid JSON only (acceptPredict checked it).

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the content of the string at b[i], where it ends and
// whether it holds an escape.
func scanString(b []byte, i int) ([]byte, int, bool) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return b[i+1 : j], j + 1, esc
		}
	}
	return nil, len(b), true
}

func scanNumber(b []byte, i int) int {
	for i < len(b) {
		switch c := b[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns where the value at b[i] ends.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		_, end, _ := scanString(b, i)
		return end
	case 't', 'n':
		return i + 4
	case 'f':
		return i + 5
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				_, i, _ = scanString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	return scanNumber(b, i)
}
