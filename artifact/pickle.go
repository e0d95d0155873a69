package artifact

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
)

// pickleArg is how an opcode's argument is encoded.
type pickleArg int

const (
	argNone     pickleArg = iota
	argFixed              // n raw bytes
	argLen1               // 1-byte length, then data
	argLen4               // 4-byte signed length, then data
	argULen4              // 4-byte unsigned length, then data
	argLen8               // 8-byte length, then data
	argInt                // an integer line (INT, LONG, GET, PUT)
	argFloat              // a float line
	argQuoted             // a quoted string line
	argLine               // any line
	argTwoLines           // module and name lines
)

// Stack effects of an opcode, beyond its pops and pushes.
const (
	markNone = iota
	markPush // push a mark
	markPop  // pop everything down to the last mark, and the mark
)

// What an opcode does beyond the stack, for telling a pickle that can run
// code from one that only builds lists and strings.
const (
	effectNone   = iota
	effectImport // puts an object the loader resolves on the stack: a global (which imports its module) or a persistent id
	effectCall   // calls into an object on the stack: a call, a build, a method the container ops look up, a hash
	effectBoth   // INST imports and calls at once
)

type pickleOp struct {
	arg    pickleArg
	n      int // bytes of an argFixed argument
	mark   int
	pop    int // items popped (after markPop, from below the mark)
	push   int
	proto  int // protocol that introduced the opcode
	effect int
}

// pickleOps is the opcode table of pickle protocols 0 to 5, from Python's
// pickletools, with the stack checks of CPython's C unpickler
// (Modules/_pickle.c). The stack effects let the scan tell a loadable pickle
// from text that happens to start with opcode characters, such as
// "1. Install".
var pickleOps = map[byte]pickleOp{
	'(':  {mark: markPush},
	'.':  {pop: 1},
	'0':  {pop: 1},
	'1':  {mark: markPop, proto: 1},
	'2':  {pop: 1, push: 2},
	'F':  {arg: argFloat, push: 1},
	'I':  {arg: argInt, push: 1},
	'J':  {arg: argFixed, n: 4, push: 1, proto: 1},
	'K':  {arg: argFixed, n: 1, push: 1, proto: 1},
	'L':  {arg: argInt, push: 1},
	'M':  {arg: argFixed, n: 2, push: 1, proto: 1},
	'N':  {push: 1},
	'P':  {arg: argLine, push: 1, effect: effectImport},
	'Q':  {pop: 1, push: 1, proto: 1, effect: effectImport},
	'R':  {pop: 2, push: 1, effect: effectCall},
	'S':  {arg: argQuoted, push: 1},
	'T':  {arg: argLen4, push: 1, proto: 1},
	'U':  {arg: argLen1, push: 1, proto: 1},
	'V':  {arg: argLine, push: 1},
	'X':  {arg: argULen4, push: 1, proto: 1},
	'a':  {pop: 2, push: 1, effect: effectCall},
	'b':  {pop: 2, push: 1, effect: effectCall},
	'c':  {arg: argTwoLines, push: 1, effect: effectImport},
	'd':  {mark: markPop, push: 1, effect: effectCall},
	'}':  {push: 1, proto: 1},
	'e':  {mark: markPop, pop: 1, push: 1, proto: 1, effect: effectCall},
	'g':  {arg: argInt, push: 1},
	'h':  {arg: argFixed, n: 1, push: 1, proto: 1},
	'i':  {arg: argTwoLines, mark: markPop, push: 1, effect: effectBoth},
	'j':  {arg: argFixed, n: 4, push: 1, proto: 1},
	'l':  {mark: markPop, push: 1},
	']':  {push: 1, proto: 1},
	'o':  {mark: markPop, push: 1, proto: 1, effect: effectCall},
	'p':  {arg: argInt, pop: 1, push: 1},
	'q':  {arg: argFixed, n: 1, pop: 1, push: 1, proto: 1},
	'r':  {arg: argFixed, n: 4, pop: 1, push: 1, proto: 1},
	's':  {pop: 3, push: 1, effect: effectCall},
	't':  {mark: markPop, push: 1},
	')':  {push: 1, proto: 1},
	'u':  {mark: markPop, pop: 1, push: 1, proto: 1, effect: effectCall},
	'G':  {arg: argFixed, n: 8, push: 1, proto: 1},
	0x80: {arg: argFixed, n: 1, proto: 2},
	0x81: {pop: 2, push: 1, proto: 2, effect: effectCall},
	0x82: {arg: argFixed, n: 1, push: 1, proto: 2, effect: effectImport},
	0x83: {arg: argFixed, n: 2, push: 1, proto: 2, effect: effectImport},
	0x84: {arg: argFixed, n: 4, push: 1, proto: 2, effect: effectImport},
	0x85: {pop: 1, push: 1, proto: 2},
	0x86: {pop: 2, push: 1, proto: 2},
	0x87: {pop: 3, push: 1, proto: 2},
	0x88: {push: 1, proto: 2},
	0x89: {push: 1, proto: 2},
	0x8a: {arg: argLen1, push: 1, proto: 2},
	0x8b: {arg: argLen4, push: 1, proto: 2},
	'B':  {arg: argULen4, push: 1, proto: 3},
	'C':  {arg: argLen1, push: 1, proto: 3},
	0x8c: {arg: argLen1, push: 1, proto: 4},
	0x8d: {arg: argLen8, push: 1, proto: 4},
	0x8e: {arg: argLen8, push: 1, proto: 4},
	0x8f: {push: 1, proto: 4},
	0x90: {mark: markPop, pop: 1, push: 1, proto: 4, effect: effectCall},
	0x91: {mark: markPop, push: 1, proto: 4, effect: effectCall},
	0x92: {pop: 3, push: 1, proto: 4, effect: effectCall},
	0x93: {pop: 2, push: 1, proto: 4, effect: effectImport},
	0x94: {pop: 1, push: 1, proto: 4},
	0x95: {arg: argFixed, n: 8, proto: 4},
	0x96: {arg: argLen8, push: 1, proto: 5},
	0x97: {push: 1, proto: 5},
	0x98: {pop: 1, push: 1, proto: 5},
}

// pickleScan is what a scan of a file's first bytes found.
type pickleScan struct {
	// found means the bytes must be refused as pickle: the opcodes reached
	// STOP, or ran a call after importing a global, or were still valid
	// where the scan had to end before the end of the file.
	found   bool
	stopped bool // the opcodes reached STOP
	called  bool // a call ran after an import, whatever came next
	limit   bool // the scan passed its own bound
	ops     int  // opcodes run
	proto   int  // the protocol it declares, or the highest its opcodes need
}

// maxPickleMarks bounds the mark stack a scan keeps. CPython has no such
// bound, so a stream that reaches it counts as a pickle.
const maxPickleMarks = 1 << 20

// maxPickleLine is the longest number line a scan checks. A longer one is
// taken as valid: hexadecimal integers have no length limit in CPython.
const maxPickleLine = 4096

// Phases of a scan: what the next byte is.
const (
	phaseOp   = iota // an opcode
	phaseLen         // part of a length prefix or of a fixed argument
	phaseSkip        // data of a length-prefixed argument
	phaseLine        // part of a line argument
	phaseDone        // the verdict is in; later bytes change nothing
)

// A pickleScanner runs the opcodes of a pickle stream the way CPython's
// unpickler would, without building any object, over bytes fed to it in
// pieces. It stops at the first opcode the unpickler would fail on, at STOP,
// or at the first call made after an import: the unpickler runs each opcode
// as it reads it, so what comes after a call does not undo it.
//
// The scan is meant to be fail-closed. Every check that ends it is one the
// unpickler also fails (a test checks the argument rules against CPython),
// and where the scan cannot decide (its own mark bound, or bytes it was not
// given before the end of the file) the stream counts as a pickle.
type pickleScanner struct {
	size int64 // length of the whole file; -1 when unknown
	pos  int64 // offset of the next byte

	phase  int
	code   byte
	op     pickleOp
	frames []int // items on the stack above each mark; frames[0] is below all marks

	buf     [8]byte // a length prefix or fixed argument being read
	bufLen  int
	bufWant int
	skip    uint64 // data bytes of the current argument still to come

	line      []byte // the start of the line argument being read
	lineLen   int64  // bytes of the current line so far
	lineFirst byte
	lineLast  byte
	lines     int // lines of a two-line argument finished

	proto, declared, ops int
	imported             bool
	res                  pickleScan
}

// newPickleScanner returns a scanner for a file of size bytes, or of unknown
// size when size is negative.
func newPickleScanner(size int64) *pickleScanner {
	return &pickleScanner{size: max(size, -1), frames: []int{0}, declared: -1}
}

// Write feeds the next bytes of the file, as write does, so a scan can
// follow what another reader reads (io.TeeReader).
func (s *pickleScanner) Write(b []byte) (int, error) {
	s.write(b)
	return len(b), nil
}

// done reports whether the verdict is in, so later bytes need not be fed.
func (s *pickleScanner) done() bool { return s.phase == phaseDone }

// write feeds the next bytes of the file.
func (s *pickleScanner) write(b []byte) {
	for len(b) > 0 && s.phase != phaseDone {
		switch s.phase {
		case phaseOp:
			s.opcode(b[0])
			b = s.advance(b, 1)
		case phaseLen:
			k := copy(s.buf[s.bufLen:s.bufWant], b)
			s.bufLen += k
			b = s.advance(b, k)
			if s.bufLen == s.bufWant {
				s.prefixDone()
			}
		case phaseSkip:
			k := int(min(s.skip, uint64(len(b))))
			s.skip -= uint64(k)
			b = s.advance(b, k)
			if s.skip == 0 {
				s.finish()
			}
		case phaseLine:
			i := bytes.IndexByte(b, '\n')
			part := b
			if i >= 0 {
				part = b[:i]
			}
			s.linePart(part)
			b = s.advance(b, len(part))
			if i >= 0 {
				b = s.advance(b, 1)
				s.lineEnd()
			}
		}
	}
}

func (s *pickleScanner) advance(b []byte, n int) []byte {
	s.pos += int64(n)
	return b[n:]
}

// end is called after the last byte given and returns the verdict. complete
// says whether those bytes were the whole file, which a known size also
// tells.
func (s *pickleScanner) end(complete bool) pickleScan {
	if s.phase != phaseDone {
		used := s.proto
		if s.phase != phaseOp { // inside an argument: the opcode is part of the stream too
			used = max(used, s.op.proto)
		}
		s.res.ops, s.res.proto = s.ops, protoOf(s.declared, used)
		if !complete && (s.size < 0 || s.pos < s.size) && s.pos > 0 {
			// Still valid where the bytes ran out, and the file goes on.
			s.res.found = true
		}
		s.phase = phaseDone
	}
	return s.res
}

// fail ends the scan where the unpickler would raise an error.
func (s *pickleScanner) fail() {
	s.res = pickleScan{ops: s.ops, proto: protoOf(s.declared, s.proto)}
	s.phase = phaseDone
}

// refuse ends the scan with a verdict of pickle, for the reason set in r.
func (s *pickleScanner) refuse(r pickleScan) {
	r.found, r.ops, r.proto = true, s.ops, protoOf(s.declared, s.proto)
	s.res = r
	s.phase = phaseDone
}

// opcode starts the opcode code: it checks the stack first, as the
// unpickler fails on a short stack whatever the argument, then reads the
// argument.
func (s *pickleScanner) opcode(code byte) {
	op, ok := pickleOps[code]
	if !ok {
		s.fail()
		return
	}
	if !s.stack(code, op) {
		return
	}
	s.code, s.op = code, op
	switch op.arg {
	case argNone:
		s.finish()
	case argFixed:
		s.phase, s.bufLen, s.bufWant = phaseLen, 0, op.n
	case argLen1:
		s.phase, s.bufLen, s.bufWant = phaseLen, 0, 1
	case argLen4, argULen4:
		s.phase, s.bufLen, s.bufWant = phaseLen, 0, 4
	case argLen8:
		s.phase, s.bufLen, s.bufWant = phaseLen, 0, 8
	default:
		s.phase, s.line, s.lineLen, s.lines = phaseLine, s.line[:0], 0, 0
	}
}

// stack applies the stack effect of an opcode, or fails the scan.
func (s *pickleScanner) stack(code byte, op pickleOp) bool {
	top := len(s.frames) - 1
	switch {
	case code == '0' && s.frames[top] == 0 && top > 0: // POP on an empty frame pops the mark
		s.frames = s.frames[:top]
		return true
	case op.mark == markPush:
		if len(s.frames) == maxPickleMarks {
			s.refuse(pickleScan{limit: true})
			return false
		}
		s.frames = append(s.frames, 0)
		return true
	case op.mark == markPop:
		if top == 0 || code == 'o' && s.frames[top] == 0 {
			s.fail()
			return false
		}
		s.frames = s.frames[:top]
		top--
	}
	if s.frames[top] < op.pop {
		s.fail()
		return false
	}
	s.frames[top] += op.push - op.pop
	return true
}

// prefixDone handles a length prefix or a fixed argument once read.
func (s *pickleScanner) prefixDone() {
	b := s.buf[:s.bufLen]
	var n uint64
	switch s.op.arg {
	case argFixed:
		if s.code == 0x80 {
			if b[0] > 5 { // unsupported pickle protocol
				s.fail()
				return
			}
			s.declared = int(b[0])
		}
		s.finish()
		return
	case argLen1:
		n = uint64(b[0])
	case argLen4:
		v := int32(binary.LittleEndian.Uint32(b))
		if v < 0 { // "negative byte count"
			s.fail()
			return
		}
		n = uint64(v)
	case argULen4:
		n = uint64(binary.LittleEndian.Uint32(b))
	case argLen8:
		n = binary.LittleEndian.Uint64(b)
	}
	if s.size >= 0 && n > uint64(s.size-s.pos) { // the data runs past the end of the file
		s.fail()
		return
	}
	if n == 0 {
		s.finish()
		return
	}
	s.phase, s.skip = phaseSkip, n
}

// linePart takes bytes of the current line, without its newline.
func (s *pickleScanner) linePart(b []byte) {
	if len(b) == 0 {
		return
	}
	if s.lineLen == 0 {
		s.lineFirst = b[0]
	}
	s.lineLast = b[len(b)-1]
	s.lineLen += int64(len(b))
	if room := maxPickleLine + 1 - len(s.line); room > 0 && s.lines == 0 {
		s.line = append(s.line, b[:min(len(b), room)]...)
	}
}

// lineEnd checks a line argument at its newline.
func (s *pickleScanner) lineEnd() {
	ok := true
	switch s.op.arg {
	case argInt:
		ok = s.lineLen > maxPickleLine || pickleIntArg(s.code, s.line)
	case argFloat:
		ok = s.lineLen > maxPickleLine || pickleFloatArg(s.line)
	case argQuoted:
		ok = s.lineLen >= 2 && s.lineFirst == s.lineLast && (s.lineFirst == '\'' || s.lineFirst == '"')
	case argTwoLines:
		// Module and name must each be a line of at least one byte.
		if s.lineLen == 0 {
			ok = false
		} else if s.lines == 0 {
			s.lines, s.lineLen = 1, 0
			return
		}
	}
	if !ok {
		s.fail()
		return
	}
	s.finish()
}

// finish runs the opcode whose argument has been read.
func (s *pickleScanner) finish() {
	s.ops++
	s.proto = max(s.proto, s.op.proto)
	s.phase = phaseOp
	switch s.op.effect {
	case effectImport:
		s.imported = true
	case effectCall:
		if s.imported {
			s.refuse(pickleScan{called: true})
			return
		}
	case effectBoth:
		s.refuse(pickleScan{called: true})
		return
	}
	if s.code == '.' {
		s.refuse(pickleScan{stopped: true})
	}
}

// scanPickle scans b, the whole file when complete is true and otherwise
// only its first bytes, and reports what it found.
func scanPickle(b []byte, complete bool) pickleScan {
	size := int64(-1)
	if complete {
		size = int64(len(b))
	}
	s := newPickleScanner(size)
	s.write(b)
	return s.end(complete)
}

func protoOf(declared, used int) int {
	if declared >= 0 {
		return declared
	}
	return used
}

// pickleIntArg reports whether CPython reads line, the argument of an INT,
// LONG, GET or PUT opcode without its newline, as an integer. The C
// unpickler parses a NUL-terminated copy of the line, so a NUL ends the
// number. INT tries C's strtol(s, 0) first, which also reads old-style octal
// ("010"), and falls back to int(s, 0), as does the Python unpickler; LONG
// drops one trailing "L" and uses int(s, 0); GET and PUT use int(s) in base
// 10. A wrong "no" here would let a pickle pass as text, so each rule is
// checked against CPython by a test.
func pickleIntArg(code byte, line []byte) bool {
	nul := bytes.IndexByte(line, 0)
	if nul >= 0 {
		line = line[:nul]
	}
	switch code {
	case 'I':
		// strtol of an empty string reads nothing and stops on the NUL,
		// which the C unpickler accepts as the end of the number.
		return nul == 0 || strtolOctal(line) || pyInt(line, 0)
	case 'L':
		if nul < 0 {
			line = bytes.TrimSuffix(line, []byte("L"))
		}
		return pyInt(line, 0)
	}
	return pyInt(line, 10)
}

// isPySpace is Python's Py_ISSPACE for the bytes int() and float() skip.
func isPySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func trimPySpace(b []byte) []byte {
	for len(b) > 0 && isPySpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isPySpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// pyInt reports whether Python's int(s, base) accepts s, for base 0 or 10,
// following PyLong_FromString: surrounding whitespace, a sign, for base 0 a
// 0x, 0o or 0b prefix (optionally followed by one underscore) and no
// leading zeros in a decimal other than zero itself, and single underscores
// only between digits.
func pyInt(s []byte, base int) bool {
	s = trimPySpace(s)
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	zerosOnly := false
	if base == 0 {
		base = 10
		if len(s) >= 2 && s[0] == '0' {
			switch s[1] {
			case 'x', 'X':
				base, s = 16, s[2:]
			case 'o', 'O':
				base, s = 8, s[2:]
			case 'b', 'B':
				base, s = 2, s[2:]
			default:
				zerosOnly = true // old-style octal is an error unless it is zero
			}
			if base != 10 && len(s) > 0 && s[0] == '_' {
				s = s[1:]
			}
		}
	}
	digits, prev := 0, byte(0)
	for _, c := range s {
		switch {
		case c == '_':
			if prev == '_' || prev == 0 {
				return false
			}
		case digitValue(c) < base:
			digits++
			if zerosOnly && c != '0' {
				return false
			}
		default:
			return false
		}
		prev = c
	}
	return digits > 0 && prev != '_'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// strtolOctal reports whether C's strtol(s, &end, 0) reads all of s as an
// old-style octal number ("010", " -07") that fits a long; other forms
// strtol reads whole are ones int(s, 0) also accepts.
func strtolOctal(s []byte) bool {
	for len(s) > 0 && isPySpace(s[0]) {
		s = s[1:]
	}
	neg := len(s) > 0 && s[0] == '-'
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if len(s) < 2 || s[0] != '0' {
		return false
	}
	v, err := strconv.ParseUint(string(s), 8, 64)
	return err == nil && (v <= math.MaxInt64 || neg && v == 1<<63)
}

// pickleFloatArg reports whether CPython reads line, a FLOAT argument
// without its newline, as a float: the C unpickler's strtod, which stops at
// a NUL and reads inf and nan in any case and with a sign, or the Python
// unpickler's float(), which also takes whitespace around and single
// underscores between digits. Out-of-range values count: float() makes
// them infinite.
func pickleFloatArg(line []byte) bool {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	s := trimPySpace(line)
	for i, c := range s {
		if c == '_' && (i == 0 || i == len(s)-1 || !isDigit(s[i-1]) || !isDigit(s[i+1])) {
			return false
		}
	}
	s = bytes.ReplaceAll(s, []byte("_"), nil)
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	switch string(bytes.ToLower(s)) {
	case "inf", "infinity", "nan":
		return true
	}
	digits := 0
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == exp {
			return false
		}
	}
	return i == len(s)
}
