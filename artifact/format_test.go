package artifact

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func detectBytes(name string, b []byte) (Format, error) {
	return Detect(name, bytes.NewReader(b), int64(len(b)))
}

// bigText is text longer than the head Detect reads up front, with
// multi-byte runes that fall across read boundaries.
var bigText = strings.Repeat("ligne numéro — 日本語 ✓\n", 8000)

// bigPickle0 is a protocol 0 pickle of a list of 20000 strings, longer than
// the head Detect reads up front.
var bigPickle0 = []byte("(lp0\n" + strings.Repeat("Vtoken\np1\na", 20000) + ".")

var bigJSON = `{"vocab":{` + strings.Repeat(`"naïve日本":1,`, 20000) + `"end":2}}`

func TestDetectAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		content []byte
		want    Format
	}{
		{"safetensors", "model.safetensors", validSafetensors, FormatSafetensors},
		{"safetensors starting like a pickle", "model.safetensors", safetensorsLen1152, FormatSafetensors},
		{"safetensors under another name", "pytorch_model.bin", validSafetensors, FormatSafetensors},
		{"safetensors whose length reads as a line opcode", "model.safetensors", safetensorsLine('V', 1<<17, nil), FormatSafetensors},
		{"safetensors that unpickles to a value", "model.safetensors", safetensorsLine('I', 1<<17, []byte("\n.")), FormatSafetensors},
		{"gguf", "model-q4.gguf", validGGUF, FormatGGUF},
		{"onnx", "model.onnx", validONNX, FormatONNX},
		{"xgboost json", "model.json", []byte(xgboostJSON), FormatXGBoostJSON},
		{"lightgbm text", "model.txt", []byte(lightgbmText), FormatLightGBM},
		{"lightgbm without tree line", "model.txt", []byte("version=v3\nnum_class=1\n"), FormatLightGBM},
		{"config json", "config.json", []byte(configJSON), FormatJSON},
		{"json array", "labels.json", []byte(`["cat", "dog"]`), FormatJSON},
		{"json scalar under a json name", "threshold.json", []byte(`0.5`), FormatJSON},
		{"json without a json name", "tokenizer_config", []byte(` {"a": [1, 2, {"b": null}]}`), FormatJSON},
		{"xgboost key not at top level", "config.json", []byte(`{"model":{"learner":1}}`), FormatJSON},
		{"learner as a value is not xgboost", "config.json", []byte(`{"kind":"learner"}`), FormatJSON},
		{"tokenizer vocab", "vocab.txt", []byte(vocabText), FormatText},
		{"yaml", "config.yaml", []byte("model:\n  name: llama\n  layers: 32\n"), FormatText},
		{"ini starts like json", "setup.cfg", []byte("[metadata]\nname = demo\n"), FormatText},
		{"numbered list, not a pickle", "README.md", []byte("1. Install the model.\n2. Serve it.\n"), FormatText},
		{"copyright, not a pickle", "LICENSE", []byte("(c) 2024 Example Corp.\n"), FormatText},
		{"text starting with GGUF", "notes.md", []byte("GGUF files are quantized.\n"), FormatText},
		{"empty text", "empty.txt", nil, FormatText},
		{"crlf text", "merges.txt", []byte("#version: 0.2\r\nĠ t\r\n"), FormatText},
		{"long text", "corpus.txt", []byte(bigText), FormatText},
		{"long json", "tokenizer.json", []byte(bigJSON), FormatJSON},
		{"long text that starts like an opcode", "trees.txt", []byte(strings.Repeat("Tree=0\nnum_leaves=31\n", 4000)), FormatText},
		{"long text, first line like a global", "notes.txt", []byte("cat\ndog\n" + bigText), FormatText},
		{"labels that import a global but call nothing", "labels.txt", []byte("cat\ndog\nbird\n"), FormatText},
		{"labels like a persistent id", "labels.txt", []byte("Positive\nNegative\nNeutral\n"), FormatText},
		{"one line like a unicode opcode", "VERSION", []byte("Version 1.2.3\n"), FormatText},
		{"a valid int, then words", "notes.txt", []byte("I0x10\nfoo bar\n"), FormatText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := detectBytes(tt.file, tt.content)
			if err != nil {
				t.Fatalf("Detect(%s) error: %v, want %s", tt.file, err, tt.want)
			}
			if got != tt.want {
				t.Errorf("Detect(%s) = %s, want %s", tt.file, got, tt.want)
			}
		})
	}
}

func TestDetectRejects(t *testing.T) {
	t.Parallel()
	zipPlain := zipFile(t, map[string][]byte{"config.json": []byte(configJSON)}, "config.json")
	nulLate := []byte(strings.Repeat("a", 70000) + "\x00tail")
	tests := []struct {
		name    string
		file    string
		content []byte
		want    string // the whole message
	}{
		{"pickle renamed safetensors", "model.safetensors", pickle4,
			"model.safetensors: pickle content is not accepted (raw pickle protocol 4)"},
		{"malicious pickle protocol 4", "model.onnx", pickle4Evil,
			"model.onnx: pickle content is not accepted (raw pickle protocol 4)"},
		{"pickle protocol 2 named json", "config.json", pickle2Evil,
			"config.json: pickle content is not accepted (raw pickle protocol 2)"},
		{"pickle protocol 1", "weights.bin", pickle1Evil,
			"weights.bin: pickle content is not accepted (raw pickle protocol 1)"},
		{"pickle protocol 0 is text", "notes.txt", pickle0Evil,
			"notes.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"pickle protocol 0 dict", "config.yaml", pickle0,
			"config.yaml: pickle content is not accepted (raw pickle protocol 0)"},
		{"long pickle protocol 0", "data.txt", bigPickle0,
			"data.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"protocol 0 with a hex int", "vocab.txt", []byte("I0x0\n0cbuiltins\nprint\n(S'x'\ntR."),
			"vocab.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"protocol 0 with a signed nan", "vocab.txt", []byte("F-nan\n0" + callPrint),
			"vocab.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"protocol 0 that calls, then turns invalid", "notes.txt", []byte("cbuiltins\nprint\n(S'x'\ntR\nmore notes\n"),
			"notes.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"protocol 0 whose first argument outruns the head", "notes.txt", []byte("S'" + strings.Repeat("a", headSize) + "'\n0" + callPrint),
			"notes.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"protocol 0 under more marks than a head holds", "notes.txt", []byte(strings.Repeat("(", headSize+10) + callPrint),
			"notes.txt: pickle content is not accepted (raw pickle protocol 0)"},
		{"onnx that also loads as a pickle", "model.onnx", onnxPickle,
			"model.onnx: pickle content is not accepted (onnx that also loads as raw pickle protocol 0)"},
		{"onnx whose pickle reading skips past the head", "model.onnx", onnxPickleFar,
			"model.onnx: pickle content is not accepted (onnx that also loads as raw pickle protocol 5)"},
		{"torch zip", "model.pt", torchZip(t),
			"model.pt: zip archives are not accepted (torch .pt/.pth zips contain pickle)"},
		{"torch zip renamed safetensors", "model.safetensors", torchZip(t),
			"model.safetensors: zip archives are not accepted (torch .pt/.pth zips contain pickle)"},
		{"zip without pickle", "bundle.zip", zipPlain,
			"bundle.zip: zip archives are not accepted"},
		{"joblib plain", "model.joblib", joblibPickle,
			"model.joblib: pickle content is not accepted (raw pickle protocol 4)"},
		{"joblib zlib", "model.joblib", zlibBytes(t, joblibPickle),
			"model.joblib: pickle content is not accepted (joblib zlib-compressed pickle)"},
		{"joblib zlib renamed", "model.safetensors", zlibBytes(t, pickle4Evil),
			"model.safetensors: pickle content is not accepted (joblib zlib-compressed pickle)"},
		{"joblib gzip", "model.joblib.gz", gzipBytes(t, joblibPickle),
			"model.joblib.gz: pickle content is not accepted (gzip-compressed pickle, as joblib writes)"},
		{"joblib zfile", "model.pkl", joblibZFile(t),
			"model.pkl: pickle content is not accepted (joblib zfile-compressed pickle)"},
		{"zlib of text", "data.z", zlibBytes(t, []byte(vocabText)),
			"data.z: zlib-compressed files are not accepted"},
		{"gzip of text", "vocab.txt.gz", gzipBytes(t, []byte(vocabText)),
			"vocab.txt.gz: gzip-compressed files are not accepted"},
		{"tar as a file", "weights.tar", tarFile(t, tarEntry{name: "config.json", body: []byte(configJSON)}),
			"weights.tar: tar archives are not accepted as a file (upload the files, or the whole version as one tar)"},
		{"tar.gz as a file", "weights.tgz", gzipBytes(t, tarFile(t, tarEntry{name: "config.json", body: []byte(configJSON)})),
			"weights.tgz: tar archives are not accepted as a file (upload the files, or the whole version as one tar)"},
		{"numpy", "emb.npy", []byte("\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"),
			"emb.npy: numpy files are not accepted (they may hold pickle)"},
		{"bzip2", "model.pkl.bz2", []byte("BZh91AY&SY\x00\x01\x02"),
			"model.pkl.bz2: bzip2-compressed files are not accepted"},
		{"unknown binary", "weights.dat", []byte{0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3},
			"weights.dat: unknown format (accepted: safetensors, onnx, gguf, json, utf-8 text)"},
		{"invalid utf-8", "notes.txt", []byte("caf\xe9 au lait\n"),
			"notes.txt: unknown format (accepted: safetensors, onnx, gguf, json, utf-8 text)"},
		{"nul after the head", "notes.txt", nulLate,
			"notes.txt: binary content (nul byte at offset 70000)"},
		{"safetensors offsets outside data", "model.safetensors",
			safetensorsFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,99]}}`, make([]byte, 8)),
			`model.safetensors: invalid safetensors header: tensor "w": data_offsets [0, 99] outside the 8 data bytes`},
		{"safetensors header not json", "model.safetensors", safetensorsFile(`{"w":`, make([]byte, 8)),
			"model.safetensors: invalid safetensors header: header is not a json object: unexpected end of JSON input"},
		{"gguf counts too large", "model.gguf", cat([]byte("GGUF"), le32(3), le64(1<<40), le64(0)),
			"model.gguf: invalid gguf header: 1099511627776 tensors and 0 metadata entries cannot fit in 24 bytes"},
		{"onnx without graph", "model.onnx", cat(pbInt(1, 8), pbString(2, "pytorch")),
			"model.onnx: invalid onnx model: no graph"},
		{"onnx with a foreign field", "model.onnx", cat(pbInt(1, 8), pbInt(9, 1)),
			"model.onnx: invalid onnx model: model: unexpected field 9 (wire type 0) at offset 2"},
		{"onnx truncated", "model.onnx", validONNX[:len(validONNX)-3],
			"model.onnx: invalid onnx model: model: field 8 length 4 runs past the end"},
		{"invalid json", "config.json", []byte(`{"a": 1,}`),
			"config.json: invalid json: invalid character '}' at offset 8 looking for an object key"},
		{"two json values", "config.json", []byte(`{} {}`),
			"config.json: invalid json: invalid character '{' at offset 3 after the top-level value"},
		{"empty json", "config.json", nil,
			"config.json: invalid json: unexpected end of input"},
		{"text named safetensors", "model.safetensors", []byte("not really\n"),
			"model.safetensors: content is text, not safetensors"},
		{"json named onnx", "model.onnx", []byte(configJSON),
			"model.onnx: content is json, not onnx"},
		{"text under a pickle name", "pytorch_model.bin", []byte("hello\n"),
			"pytorch_model.bin: text content under a pickle file name (.bin) is not accepted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := detectBytes(tt.file, tt.content)
			if err == nil {
				t.Fatalf("Detect(%s) = %s, want rejection %q", tt.file, got, tt.want)
			}
			if !errors.Is(err, ErrRejected) {
				t.Errorf("Detect(%s) error %v does not wrap ErrRejected", tt.file, err)
			}
			var rej *Rejection
			if !errors.As(err, &rej) || rej.Path != tt.file {
				t.Errorf("Detect(%s) error %#v, want a *Rejection with Path %q", tt.file, err, tt.file)
			}
			if err.Error() != tt.want {
				t.Errorf("Detect(%s) error\n got %q\nwant %q", tt.file, err, tt.want)
			}
		})
	}
}

// TestDetectReadsBoundedPrefix checks binary model formats are recognised
// without reading their payload: the reader fails past the header.
func TestDetectReadsBoundedPrefix(t *testing.T) {
	t.Parallel()
	const size = 1 << 40 // a terabyte the reader does not have
	tests := []struct {
		name string
		head []byte
		want Format
	}{
		{"safetensors", safetensorsFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, nil), FormatSafetensors},
		{"gguf", validGGUF, FormatGGUF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &failAfter{data: append(tt.head, make([]byte, headSize)...)}
			got, err := Detect("model", r, size)
			if err != nil || got != tt.want {
				t.Fatalf("Detect = %s, %v, want %s", got, err, tt.want)
			}
			if r.read > headSize+int64(len(tt.head)) {
				t.Errorf("Detect read %d bytes, want at most %d", r.read, headSize+len(tt.head))
			}
		})
	}
}

// failAfter yields data, then fails.
type failAfter struct {
	data []byte
	read int64
}

func (f *failAfter) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, errors.New("read past the header")
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	f.read += int64(n)
	return n, nil
}

func TestDetectShortReader(t *testing.T) {
	t.Parallel()
	_, err := Detect("config.json", strings.NewReader("{}"), 10)
	if err == nil || errors.Is(err, ErrRejected) {
		t.Errorf("Detect of a reader shorter than size = %v, want a read error that is not a rejection", err)
	}
}

func TestScanPickle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		complete bool
		want     bool
		proto    int
	}{
		{"protocol 4", string(pickle4), true, true, 4},
		{"protocol 2", string(pickle2Evil), true, true, 2},
		{"protocol 1", string(pickle1Evil), true, true, 1},
		{"protocol 0", string(pickle0Evil), true, true, 0},
		{"protocol 1 floats", "}q\x00X\x01\x00\x00\x00wq\x01]q\x02(G?\xf8\x00\x00\x00\x00\x00\x00K\x02es.", true, true, 1},
		{"trailing data after stop", string(pickle0) + "garbage", true, true, 0},
		{"prefix of a pickle", string(pickle4[:10]), false, true, 4},
		{"truncated complete file", string(pickle4[:10]), true, false, 0},
		{"numbered list", "1. Install\n", true, false, 0},
		{"pop on empty stack", "0.", true, false, 0},
		{"stop on empty stack", ".", true, false, 0},
		{"stop above a mark", "N(.", true, false, 0},
		{"sentence", "I love this model.\n", true, false, 0},
		{"global then words", "cat\ndog\nand more.", true, false, 0},
		{"quoted string without stop", "S'quoted'\n", true, false, 0},
		{"bad int", "Ione\n.", true, false, 0},
		{"unquoted string", "Shello\n.", true, false, 0},
		{"unknown protocol", "\x80\x09N.", true, false, 0},
		{"negative length", "T\xff\xff\xff\xffabc.", true, false, 0},
		{"empty", "", false, false, 0},
		{"json object", `{"a": 1}`, true, false, 0},
		{"json array", `[1.]`, true, false, 0},
		{"int cut by a nul, as C reads it", "I\x00\n.", true, true, 0},
		{"long cut by a nul", "L5\x00zz\n.", true, true, 0},
		{"unicode longer than 2 GiB is unsigned", "X\x00\x00\x00\x80", false, true, 1},
		{"bytes longer than 2 GiB is unsigned", "B\x00\x00\x00\x80", false, true, 3},
		{"string longer than 2 GiB is negative", "T\x00\x00\x00\x80", false, false, 0},
		{"call after a global, no stop", "cos\nsystem\n(S'id'\ntR\n", true, true, 0},
		{"global without a call", "cat\ndog\nbird", true, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := scanPickle([]byte(tt.in), tt.complete)
			if got.found != tt.want || got.found && got.proto != tt.proto {
				t.Errorf("scanPickle(%q, %v) = %+v, want found %v protocol %d", tt.in, tt.complete, got, tt.want, tt.proto)
			}
		})
	}
}

// callPrint is protocol 0 that calls print('x') and stops: what each
// argument test puts after the opcode it checks.
const callPrint = "cbuiltins\nprint\n(S'x'\ntR."

// TestDetectPickleArguments checks protocol 0 arguments are read as CPython
// 3.11 reads them (pickle.loads, the C unpickler, or pickle._loads, the
// Python one): a text file whose argument either of them accepts runs the
// call after it and is refused; one both reject fails before the call and is
// text. Each want was checked against CPython.
func TestDetectPickleArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		op, arg string
		loads   bool
	}{
		// INT: C strtol(s, 0) first, then int(s, 0).
		{"I", "0x0", true}, {"I", "0o7", true}, {"I", "0b1", true}, {"I", "0X1F", true}, {"I", "0B11", true},
		{"I", "0O7", true}, {"I", "1_000", true}, {"I", "0x_1f", true}, {"I", "-0x1f", true}, {"I", "+5", true},
		{"I", " 12 ", true}, {"I", "12\t", true}, {"I", "00", true}, {"I", "0_0", true}, {"I", "01", true},
		{"I", "010", true}, {"I", "-010", true}, {"I", "0777777777777777777777", true},
		{"I", "0xFFFFFFFFFFFFFFFFFFFF", true}, {"I", "99999999999999999999999", true},
		{"I", "08", false}, {"I", "0_1", false}, {"I", "1__0", false}, {"I", "_1", false}, {"I", "1_", false},
		{"I", "0x", false}, {"I", "0x__1", false}, {"I", "- 1", false}, {"I", "1L", false}, {"I", "1e3", false},
		{"I", "07777777777777777777777", false}, {"I", "\t", false}, {"I", "", false},
		// LONG: int(s, 0) after one trailing L.
		{"L", "0x0", true}, {"L", "0o7L", true}, {"L", "1L", true}, {"L", "1_000", true}, {"L", "00", true},
		{"L", "01", false}, {"L", "010", false}, {"L", "1LL", false}, {"L", "0_1", false},
		// PUT (and GET): int(s) in base 10, where leading zeros are fine.
		{"p", "08", true}, {"p", "010", true}, {"p", "0_1", true}, {"p", " 12 ", true}, {"p", "+5", true},
		{"p", "0x0", false}, {"p", "1__0", false}, {"p", "1_", false},
		// FLOAT: C's strtod or float().
		{"F", "-nan", true}, {"F", "+inf", true}, {"F", "Infinity", true}, {"F", ".5", true}, {"F", "5.", true},
		{"F", "1_0.5", true}, {"F", " 1.5 ", true}, {"F", "1e999", true}, {"F", "-2E-3", true},
		{"F", "true", false}, {"F", "0x1p3", false}, {"F", "infinit", false}, {"F", "1__0", false}, {"F", "", false},
		// STRING: quoted with the same quote at both ends.
		{"S", "'x'", true}, {"S", `"x"`, true}, {"S", "''", true},
		{"S", "'", false}, {"S", `'x"`, false}, {"S", "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.op+tt.arg, func(t *testing.T) {
			t.Parallel()
			content := tt.op + tt.arg + "\n0" + callPrint
			if tt.op == "p" {
				content = "N" + content // PUT needs a value to store
			}
			_, err := detectBytes("notes.txt", []byte(content))
			if refused := errors.Is(err, ErrRejected) && strings.Contains(err.Error(), "pickle"); refused != tt.loads {
				t.Errorf("Detect(%q) = %v; CPython loads it: %v, so want refused as pickle: %v", content, err, tt.loads, tt.loads)
			}
		})
	}
}

func TestFormatIsModel(t *testing.T) {
	t.Parallel()
	for f, want := range map[Format]bool{
		FormatSafetensors: true, FormatONNX: true, FormatGGUF: true, FormatXGBoostJSON: true,
		FormatLightGBM: true, FormatJSON: false, FormatText: false,
	} {
		if got := f.IsModel(); got != want {
			t.Errorf("%s.IsModel() = %v, want %v", f, got, want)
		}
	}
}
