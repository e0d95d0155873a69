package artifact

import (
	"errors"
	"fmt"
)

// maxJSONDepth is the nesting limit of encoding/json, which this scanner
// matches so both agree on what is valid.
const maxJSONDepth = 10000

// jsonState is where a jsonScanner is in the grammar.
type jsonState int

const (
	jsValue        jsonState = iota // before a value
	jsValueOrClose                  // after '[': a value or ']'
	jsKeyOrClose                    // after '{': a key or '}'
	jsKey                           // after ',' in an object: a key
	jsColon                         // after a key
	jsAfterValue                    // after a value: ',', a closing bracket, or the end
	jsString                        // inside a string
	jsEscape                        // after '\' in a string
	jsHex                           // in the four hex digits of \u
	jsLiteral                       // inside true, false or null
	jsMinus                         // after '-' of a number
	jsZero                          // after a leading 0
	jsInt                           // in the integer digits
	jsDot                           // after '.'
	jsFrac                          // in the fraction digits
	jsE                             // after 'e' or 'E'
	jsExpSign                       // after the exponent's sign
	jsExp                           // in the exponent digits
)

// A jsonScanner checks JSON syntax as bytes arrive, holding only its nesting
// stack, so a file of any size is checked in bounded memory, far faster than
// json.Decoder.Token. It accepts exactly what json.Valid accepts (the fuzz
// test FuzzJSONScanner holds it to that), and notes whether the top-level
// object has a "learner" key, the mark of XGBoost's JSON model format.
type jsonScanner struct {
	state   jsonState
	stack   []byte // '{' or '[' per open container
	isKey   bool   // the string being read is an object key
	literal string // rest of the literal being read
	hex     int    // hex digits left in a \u escape
	key     []byte // a top-level key, up to len("learner")+1 bytes
	learner bool
	off     int64
}

var errJSONEnd = errors.New("unexpected end of input")

// write scans the next bytes.
func (s *jsonScanner) write(b []byte) error {
	for i := 0; i < len(b); i++ {
		if err := s.step(b[i]); err != nil {
			return err
		}
		s.off++
	}
	return nil
}

// end says whether the bytes so far are exactly one JSON value.
func (s *jsonScanner) end() error {
	switch s.state {
	case jsZero, jsInt, jsFrac, jsExp:
		if len(s.stack) == 0 {
			return nil
		}
	case jsAfterValue:
		if len(s.stack) == 0 {
			return nil
		}
	}
	return errJSONEnd
}

func (s *jsonScanner) format() Format {
	if s.learner {
		return FormatXGBoostJSON
	}
	return FormatJSON
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *jsonScanner) fail(c byte, what string) error {
	return fmt.Errorf("invalid character %q at offset %d %s", c, s.off, what)
}

func (s *jsonScanner) step(c byte) error {
	switch s.state {
	case jsValue, jsValueOrClose:
		if isJSONSpace(c) {
			return nil
		}
		if c == ']' && s.state == jsValueOrClose {
			return s.close(c)
		}
		return s.startValue(c)
	case jsKeyOrClose, jsKey:
		switch {
		case isJSONSpace(c):
		case c == '}' && s.state == jsKeyOrClose:
			return s.close(c)
		case c == '"':
			s.state, s.isKey = jsString, true
			s.key = s.key[:0]
		default:
			return s.fail(c, "looking for an object key")
		}
		return nil
	case jsColon:
		switch {
		case isJSONSpace(c):
		case c == ':':
			s.state = jsValue
		default:
			return s.fail(c, "after an object key")
		}
		return nil
	case jsAfterValue:
		return s.afterValue(c)
	case jsString:
		switch {
		case c == '"':
			if s.isKey {
				if len(s.stack) == 1 && string(s.key) == "learner" {
					s.learner = true
				}
				s.state = jsColon
			} else {
				s.state = jsAfterValue
			}
		case c == '\\':
			s.state = jsEscape
			s.key = append(s.key, 0) // an escaped key is never taken for "learner"
		case c < 0x20:
			return s.fail(c, "in a string")
		case s.isKey && len(s.key) <= len("learner"):
			s.key = append(s.key, c)
		}
		return nil
	case jsEscape:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.state = jsString
		case 'u':
			s.state, s.hex = jsHex, 4
		default:
			return s.fail(c, "in a string escape")
		}
		return nil
	case jsHex:
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return s.fail(c, "in a \\u escape")
		}
		if s.hex--; s.hex == 0 {
			s.state = jsString
		}
		return nil
	case jsLiteral:
		if c != s.literal[0] {
			return s.fail(c, "in a literal")
		}
		if s.literal = s.literal[1:]; s.literal == "" {
			s.state = jsAfterValue
		}
		return nil
	}
	return s.number(c)
}

// startValue begins the value that c starts.
func (s *jsonScanner) startValue(c byte) error {
	switch {
	case c == '{' || c == '[':
		if len(s.stack) == maxJSONDepth {
			return fmt.Errorf("json nested deeper than %d at offset %d", maxJSONDepth, s.off)
		}
		s.stack = append(s.stack, c)
		s.state = jsValueOrClose
		if c == '{' {
			s.state = jsKeyOrClose
		}
	case c == '"':
		s.state, s.isKey = jsString, false
	case c == '-':
		s.state = jsMinus
	case c == '0':
		s.state = jsZero
	case '1' <= c && c <= '9':
		s.state = jsInt
	case c == 't':
		s.state, s.literal = jsLiteral, "rue"
	case c == 'f':
		s.state, s.literal = jsLiteral, "alse"
	case c == 'n':
		s.state, s.literal = jsLiteral, "ull"
	default:
		return s.fail(c, "looking for a value")
	}
	return nil
}

// afterValue handles c after a complete value.
func (s *jsonScanner) afterValue(c byte) error {
	if isJSONSpace(c) {
		return nil
	}
	if len(s.stack) == 0 {
		return s.fail(c, "after the top-level value")
	}
	switch top := s.stack[len(s.stack)-1]; {
	case c == ',' && top == '{':
		s.state = jsKey
	case c == ',' && top == '[':
		s.state = jsValue
	case c == '}' || c == ']':
		return s.close(c)
	default:
		return s.fail(c, "after a value")
	}
	return nil
}

// close ends the innermost container with c.
func (s *jsonScanner) close(c byte) error {
	open := s.stack[len(s.stack)-1]
	if open == '{' && c != '}' || open == '[' && c != ']' {
		return s.fail(c, "closing a container")
	}
	s.stack = s.stack[:len(s.stack)-1]
	s.state = jsAfterValue
	return nil
}

// number steps through a number; a byte that cannot continue it ends it and
// is handled as what follows a value.
func (s *jsonScanner) number(c byte) error {
	digit := '0' <= c && c <= '9'
	switch s.state {
	case jsMinus:
		switch {
		case c == '0':
			s.state = jsZero
		case digit:
			s.state = jsInt
		default:
			return s.fail(c, "in a number")
		}
		return nil
	case jsZero, jsInt:
		switch {
		case digit && s.state == jsInt:
		case c == '.':
			s.state = jsDot
		case c == 'e' || c == 'E':
			s.state = jsE
		default:
			s.state = jsAfterValue
			return s.afterValue(c)
		}
		return nil
	case jsDot:
		if !digit {
			return s.fail(c, "in a number")
		}
		s.state = jsFrac
		return nil
	case jsFrac:
		switch {
		case digit:
		case c == 'e' || c == 'E':
			s.state = jsE
		default:
			s.state = jsAfterValue
			return s.afterValue(c)
		}
		return nil
	case jsE:
		switch {
		case c == '+' || c == '-':
			s.state = jsExpSign
		case digit:
			s.state = jsExp
		default:
			return s.fail(c, "in a number")
		}
		return nil
	case jsExpSign:
		if !digit {
			return s.fail(c, "in a number")
		}
		s.state = jsExp
		return nil
	case jsExp:
		if !digit {
			s.state = jsAfterValue
			return s.afterValue(c)
		}
		return nil
	}
	return fmt.Errorf("json scanner in unknown state %d", s.state)
}
