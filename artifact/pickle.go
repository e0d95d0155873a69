package artifact

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"strings"
)

// pickleArg is how an opcode's argument is encoded.
type pickleArg int

const (
	argNone     pickleArg = iota
	argFixed              // n raw bytes
	argLen1               // 1-byte length, then data
	argLen4               // 4-byte signed length, then data
	argLen8               // 8-byte length, then data
	argInt                // decimal line
	argFloat              // float line
	argQuoted             // quoted string line
	argLine               // any line
	argTwoLines           // module and name lines
)

// Stack effects of an opcode, beyond its pops and pushes.
const (
	markNone = iota
	markPush // push a mark
	markPop  // pop everything down to the last mark, and the mark
)

type pickleOp struct {
	arg   pickleArg
	n     int // bytes of an argFixed argument
	mark  int
	pop   int // items popped (after markPop, from below the mark)
	push  int
	proto int // protocol that introduced the opcode
}

// pickleOps is the opcode table of pickle protocols 0 to 5, from Python's
// pickletools. The stack effects let the scan tell a loadable pickle from
// text that happens to start with opcode characters, such as "1. Install".
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
	'P':  {arg: argLine, push: 1},
	'Q':  {pop: 1, push: 1, proto: 1},
	'R':  {pop: 2, push: 1},
	'S':  {arg: argQuoted, push: 1},
	'T':  {arg: argLen4, push: 1, proto: 1},
	'U':  {arg: argLen1, push: 1, proto: 1},
	'V':  {arg: argLine, push: 1},
	'X':  {arg: argLen4, push: 1, proto: 1},
	'a':  {pop: 2, push: 1},
	'b':  {pop: 2, push: 1},
	'c':  {arg: argTwoLines, push: 1},
	'd':  {mark: markPop, push: 1},
	'}':  {push: 1, proto: 1},
	'e':  {mark: markPop, pop: 1, push: 1, proto: 1},
	'g':  {arg: argInt, push: 1},
	'h':  {arg: argFixed, n: 1, push: 1, proto: 1},
	'i':  {arg: argTwoLines, mark: markPop, push: 1},
	'j':  {arg: argFixed, n: 4, push: 1, proto: 1},
	'l':  {mark: markPop, push: 1},
	']':  {push: 1, proto: 1},
	'o':  {mark: markPop, push: 1, proto: 1},
	'p':  {arg: argInt, pop: 1, push: 1},
	'q':  {arg: argFixed, n: 1, pop: 1, push: 1, proto: 1},
	'r':  {arg: argFixed, n: 4, pop: 1, push: 1, proto: 1},
	's':  {pop: 3, push: 1},
	't':  {mark: markPop, push: 1},
	')':  {push: 1, proto: 1},
	'u':  {mark: markPop, pop: 1, push: 1, proto: 1},
	'G':  {arg: argFixed, n: 8, push: 1, proto: 1},
	0x80: {arg: argFixed, n: 1, proto: 2},
	0x81: {pop: 2, push: 1, proto: 2},
	0x82: {arg: argFixed, n: 1, push: 1, proto: 2},
	0x83: {arg: argFixed, n: 2, push: 1, proto: 2},
	0x84: {arg: argFixed, n: 4, push: 1, proto: 2},
	0x85: {pop: 1, push: 1, proto: 2},
	0x86: {pop: 2, push: 1, proto: 2},
	0x87: {pop: 3, push: 1, proto: 2},
	0x88: {push: 1, proto: 2},
	0x89: {push: 1, proto: 2},
	0x8a: {arg: argLen1, push: 1, proto: 2},
	0x8b: {arg: argLen4, push: 1, proto: 2},
	'B':  {arg: argLen4, push: 1, proto: 3},
	'C':  {arg: argLen1, push: 1, proto: 3},
	0x8c: {arg: argLen1, push: 1, proto: 4},
	0x8d: {arg: argLen8, push: 1, proto: 4},
	0x8e: {arg: argLen8, push: 1, proto: 4},
	0x8f: {push: 1, proto: 4},
	0x90: {mark: markPop, pop: 1, push: 1, proto: 4},
	0x91: {mark: markPop, push: 1, proto: 4},
	0x92: {pop: 3, push: 1, proto: 4},
	0x93: {pop: 2, push: 1, proto: 4},
	0x94: {pop: 1, push: 1, proto: 4},
	0x95: {arg: argFixed, n: 8, proto: 4},
	0x96: {arg: argLen8, push: 1, proto: 5},
	0x97: {push: 1, proto: 5},
	0x98: {pop: 1, push: 1, proto: 5},
}

// pickleScan is what scanPickle found.
type pickleScan struct {
	found   bool // a pickle that loads, or a prefix of one that ran out of input
	stopped bool // the opcodes reached STOP
	ops     int  // opcodes run before STOP or the end of the input
	proto   int  // the protocol it declares, or the highest its opcodes need
}

// maxPickleMarks bounds the mark stack the scan keeps.
const maxPickleMarks = 1 << 16

// scanPickle reports whether b starts with a pickle opcode stream that reaches
// STOP with a value on the stack, as pickle.load would, ignoring what follows.
// When complete is false b is only a prefix of the file, and a stream still
// valid where b ends counts as found too; callers that must not mistake text
// for a pickle also look at how many opcodes ran.
func scanPickle(b []byte, complete bool) pickleScan {
	frames := []int{0} // items on the stack above each mark; frames[0] is below all marks
	proto, declared, ops := 0, -1, 0
	for i := 0; i < len(b); {
		op, ok := pickleOps[b[i]]
		if !ok {
			return pickleScan{}
		}
		code := b[i]
		i++
		next, ok := pickleArgEnd(op, b, i)
		if !ok {
			return pickleScan{}
		}
		if next > len(b) { // argument runs past the prefix
			return pickleScan{found: !complete, ops: ops, proto: protoOf(declared, max(proto, op.proto))}
		}
		if code == 0x80 {
			declared = int(b[i])
			if declared > 5 {
				return pickleScan{}
			}
		}
		i = next
		ops++
		proto = max(proto, op.proto)

		top := len(frames) - 1
		switch {
		case code == '0' && frames[top] == 0 && top > 0: // POP on an empty frame pops the mark
			frames = frames[:top]
			continue
		case op.mark == markPush:
			if len(frames) == maxPickleMarks {
				return pickleScan{}
			}
			frames = append(frames, 0)
			continue
		case op.mark == markPop:
			if top == 0 || code == 'o' && frames[top] == 0 {
				return pickleScan{}
			}
			frames = frames[:top]
			top--
		}
		if frames[top] < op.pop {
			return pickleScan{}
		}
		frames[top] += op.push - op.pop
		if code == '.' {
			return pickleScan{found: true, stopped: true, ops: ops, proto: protoOf(declared, proto)}
		}
	}
	return pickleScan{found: !complete && len(b) > 0, ops: ops, proto: protoOf(declared, proto)}
}

func protoOf(declared, used int) int {
	if declared >= 0 {
		return declared
	}
	return used
}

// pickleArgEnd returns where the argument of op starting at b[i] ends. It
// returns a value past len(b) when the argument is cut off by the end of b,
// and false when the argument is malformed.
func pickleArgEnd(op pickleOp, b []byte, i int) (int, bool) {
	rest := b[i:]
	past := len(b) + 1
	switch op.arg {
	case argNone:
		return i, true
	case argFixed:
		return i + op.n, true
	case argLen1, argLen4, argLen8:
		w := map[pickleArg]int{argLen1: 1, argLen4: 4, argLen8: 8}[op.arg]
		if len(rest) < w {
			return past, true
		}
		var n uint64
		switch w {
		case 1:
			n = uint64(rest[0])
		case 4:
			v := int32(binary.LittleEndian.Uint32(rest))
			if v < 0 {
				return 0, false
			}
			n = uint64(v)
		case 8:
			n = binary.LittleEndian.Uint64(rest)
		}
		if n > uint64(len(rest)-w) {
			return past, true
		}
		return i + w + int(n), true
	case argTwoLines:
		first := bytes.IndexByte(rest, '\n')
		if first < 0 {
			return past, true
		}
		second := bytes.IndexByte(rest[first+1:], '\n')
		if second < 0 {
			return past, true
		}
		if first == 0 || second == 0 {
			return 0, false
		}
		return i + first + 1 + second + 1, true
	}
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		return past, true
	}
	line := string(rest[:end])
	switch op.arg {
	case argInt:
		if !pickleInt(line) {
			return 0, false
		}
	case argFloat:
		if _, err := strconv.ParseFloat(strings.TrimSpace(strings.ReplaceAll(line, "_", "")), 64); err != nil {
			return 0, false
		}
	case argQuoted:
		if len(line) < 2 || line[0] != line[len(line)-1] || line[0] != '\'' && line[0] != '"' {
			return 0, false
		}
	}
	return i + end + 1, true
}

// pickleInt reports whether a line is an integer as Python's int() reads it,
// with LONG's optional trailing L.
func pickleInt(line string) bool {
	s := strings.TrimSuffix(strings.TrimSpace(line), "L")
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
