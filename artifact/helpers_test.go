package artifact

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// Pickles made by CPython 3 with pickle.dumps.
var (
	// {'a': 1}, protocol 4.
	pickle4 = []byte("\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")
	// An object whose __reduce__ returns (os.system, ('echo pwned',)), protocol 4.
	pickle4Evil = []byte("\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\necho pwned\x94\x85\x94R\x94.")
	// The same, protocol 2.
	pickle2Evil = []byte("\x80\x02cposix\nsystem\nq\x00X\n\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.")
	// The same, protocol 1.
	pickle1Evil = []byte("cposix\nsystem\nq\x00(X\n\x00\x00\x00echo pwnedq\x01tq\x02Rq\x03.")
	// The same, protocol 0: plain ASCII text.
	pickle0Evil = []byte("cposix\nsystem\np0\n(Vecho pwned\np1\ntp2\nRp3\n.")
	// {'a': 1}, protocol 0.
	pickle0 = []byte("(dp0\nVa\np1\nI1\ns.")
	// {'coef_': <joblib.numpy_pickle.NumpyArrayWrapper>}, protocol 4, as
	// joblib.dump writes before the array bytes.
	joblibPickle = []byte("\x80\x04\x95\x89\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x05coef_\x94\x8c\x13joblib.numpy_pickle\x94\x8c\x11NumpyArrayWrapper\x94\x93\x94)\x81\x94}\x94(\x8c\x08subclass\x94\x8c\x07ndarray\x94\x8c\x05shape\x94K\x02\x85\x94\x8c\x05order\x94\x8c\x01C\x94\x8c\x05dtype\x94\x8c\x03<f8\x94\x8c\nallow_mmap\x94\x89ubs.")
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// safetensorsFile builds a safetensors file from its JSON header and data.
func safetensorsFile(header string, data []byte) []byte {
	return cat(le64(uint64(len(header))), []byte(header), data)
}

// validSafetensors holds one F32 tensor of shape [2].
var validSafetensors = safetensorsFile(
	`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`,
	[]byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40})

// safetensorsLen1152 has a header padded to 1152 bytes, so the file starts
// with 0x80 0x04 like a protocol 4 pickle.
var safetensorsLen1152 = func() []byte {
	h := `{"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}`
	return safetensorsFile(h+strings.Repeat(" ", 1152-len(h)), []byte{1, 2, 3})
}()

// safetensorsLine is a safetensors file of one U8 tensor of n bytes, 0x3f
// but for data at its start, whose header is padded to op bytes: the file
// starts with op and seven NULs, which a pickle opcode that reads a line
// (INT, UNICODE) carries through the newline-free header and data.
func safetensorsLine(op byte, n int, data []byte) []byte {
	h := fmt.Sprintf(`{"w":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, n, n)
	h += strings.Repeat(" ", int(op)-len(h))
	body := bytes.Repeat([]byte{0x3f}, n)
	copy(body, data)
	return safetensorsFile(h, body)
}

func ggufString(s string) []byte { return cat(le64(uint64(len(s))), []byte(s)) }

// validGGUF is a GGUF v3 file with one metadata entry and one F32 tensor.
var validGGUF = cat(
	[]byte("GGUF"), le32(3), le64(1), le64(1),
	ggufString("general.architecture"), le32(8), ggufString("llama"),
	ggufString("w"), le32(1), le64(2), le32(0), le64(0),
	make([]byte, 32), // alignment padding and tensor data
)

// Protobuf wire encoding, for the hand-made ONNX model.
func pbVarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }
func pbInt(field int, v uint64) []byte {
	return cat(pbVarint(uint64(field)<<3|wireVarint), pbVarint(v))
}
func pbBytes(field int, b []byte) []byte {
	return cat(pbVarint(uint64(field)<<3|wireBytes), pbVarint(uint64(len(b))), b)
}
func pbString(field int, s string) []byte { return pbBytes(field, []byte(s)) }

// validONNX is a ModelProto of one Relu node with a 2-float initializer.
var validONNX = func() []byte {
	node := cat(pbString(1, "X"), pbString(2, "Y"), pbString(3, "relu0"), pbString(4, "Relu"))
	tensor := cat(pbInt(1, 2), pbInt(2, 1), pbString(8, "W"), pbBytes(9, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}))
	graph := cat(pbBytes(1, node), pbString(2, "main_graph"), pbBytes(5, tensor),
		pbBytes(11, pbString(1, "X")), pbBytes(12, pbString(1, "Y")))
	opset := cat(pbString(1, ""), pbInt(2, 17))
	return cat(pbInt(1, 8), pbString(2, "pytorch"), pbString(3, "2.1.0"), pbBytes(7, graph), pbBytes(8, opset))
}()

// onnxPickle is a valid ONNX model that is also a protocol 0 pickle calling
// print('x'): model_version 78 and a doc_string of 99 bytes read as MARK,
// NONE, DUP and a GLOBAL whose lines are the doc_string.
var onnxPickle = func() []byte {
	doc := []byte("builtins\nprint\n(S'x'\ntR.")
	doc = append(doc, bytes.Repeat([]byte(" "), 'c'-len(doc))...)
	return cat([]byte{5<<3 | wireVarint, 'N', 6<<3 | wireBytes, 'c'}, doc, validONNX)
}()

// onnxPickleFar is a valid ONNX model whose bytes, read as a pickle, declare
// protocol 5 and skip 70000 bytes with BINBYTES, past the head Detect reads,
// to a call of print('x') in a second doc_string.
var onnxPickleFar = func() []byte {
	const skip = 70000
	doc1 := cat([]byte{'B'}, le32(skip), make([]byte, 640-5))
	head := cat([]byte{5<<3 | wireVarint, 'N', 6<<3 | wireBytes, 0x80, 0x05}, doc1) // doc1 is 640 bytes: varint 0x80 0x05
	at := 10 + skip                                                                 // where the pickle resumes
	tag2 := []byte{6<<3 | wireBytes}
	payload := []byte("cbuiltins\nprint\n(S'x'\ntR.")
	pad := at - (len(head) + len(tag2) + 3)
	doc2 := cat(make([]byte, pad), payload)
	if l := pbVarint(uint64(len(doc2))); len(l) != 3 {
		panic("doc2 length must be a 3-byte varint")
	}
	return cat(head, tag2, pbVarint(uint64(len(doc2))), doc2, validONNX)
}()

const xgboostJSON = `{"learner":{"attributes":{},"feature_names":[],"gradient_booster":{"name":"gbtree","model":{"trees":[]}},"learner_model_param":{"base_score":"5E-1","num_class":"0","num_feature":"4"},"objective":{"name":"binary:logistic"}},"version":[2,0,3]}`

const lightgbmText = "tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\nmax_feature_idx=3\nobjective=binary sigmoid:1\nfeature_names=a b c d\n\nTree=0\nnum_leaves=2\nsplit_feature=0\nthreshold=0.5\nleaf_value=-0.1 0.1\n\nend of trees\n"

const configJSON = `{"architectures":["LlamaForCausalLM"],"hidden_size":4096,"num_attention_heads":32,"rope_theta":10000.0,"torch_dtype":"bfloat16"}`

const vocabText = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n##ing\ncafé\n日本\n"

// zipFile builds a zip archive with the named entries.
func zipFile(t testing.TB, entries map[string][]byte, order ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, name := range order {
		f, err := w.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(entries[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// torchZip is laid out as torch.save writes it: a pickle that refers to
// tensor storages kept as separate entries.
func torchZip(t testing.TB) []byte {
	return zipFile(t, map[string][]byte{
		"archive/data.pkl": pickle2Evil,
		"archive/data/0":   make([]byte, 16),
		"archive/version":  []byte("3\n"),
	}, "archive/data.pkl", "archive/data/0", "archive/version")
}

func zlibBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zlib.NewWriterLevel(&buf, 3) // joblib's default compress=3
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// joblibZFile is joblib's pre-0.10 compressed format.
func joblibZFile(t testing.TB) []byte {
	z := zlibBytes(t, joblibPickle)
	return cat([]byte("ZF"), []byte(fmt.Sprintf("%-18s", fmt.Sprintf("0x%x", len(joblibPickle)))), z)
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name     string
	body     []byte
	typeflag byte // tar.TypeReg when zero
	link     string
}

func tarFile(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: e.typeflag, Linkname: e.link}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := w.Write(e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
