package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/big"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func sample() ([]KV, []Tensor) {
	kvs := []KV{
		{"general.architecture", String, "llama"},
		{"general.alignment", Uint32, uint32(64)},
		{"u8", Uint8, uint8(7)}, {"i8", Int8, int8(-7)},
		{"u16", Uint16, uint16(700)}, {"i16", Int16, int16(-700)},
		{"i32", Int32, int32(-70000)}, {"f32", Float32, float32(1.5)},
		{"b", Bool, true}, {"u64", Uint64, uint64(1 << 40)}, {"i64", Int64, int64(-1 << 40)},
		{"f64", Float64, 2.25},
		{"strs", Array, []string{"a", "", "ß"}}, {"ints", Array, []int32{1, -2, 3}},
		{"floats", Array, []float32{0.5, -1}}, {"empty", Array, []string{}},
		{"bools", Array, []bool{true, false}}, {"u64s", Array, []uint64{9}},
	}
	f32 := make([]byte, 4*6)
	for i := range 6 {
		binary.LittleEndian.PutUint32(f32[4*i:], uint32(i))
	}
	tensors := []Tensor{
		{Name: "a", Dims: []uint64{3, 2}, Type: F32, Data: f32},
		{Name: "b", Dims: []uint64{5}, Type: F16, Data: []byte("0123456789")},
		{Name: "c", Dims: []uint64{32}, Type: Q8_0, Data: bytes.Repeat([]byte{1}, 34)},
	}
	return kvs, tensors
}

func encode(t *testing.T) []byte {
	t.Helper()
	kvs, ts := sample()
	var b bytes.Buffer
	if err := Write(&b, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	kvs, ts := sample()
	data := encode(t)
	f, err := Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("version %d alignment %d data offset %d", f.Version, f.Alignment, f.DataOffset)
	}
	if !reflect.DeepEqual(f.KV, kvs) {
		t.Errorf("metadata\n got %#v\nwant %#v", f.KV, kvs)
	}
	for _, want := range ts {
		ti, ok := f.Tensor(want.Name)
		if !ok {
			t.Fatalf("tensor %s missing", want.Name)
		}
		if ti.Offset%64 != 0 || !reflect.DeepEqual(ti.Dims, want.Dims) || ti.Type != want.Type {
			t.Errorf("tensor %s: %+v", want.Name, ti)
		}
		got, err := f.TensorBytes(ti)
		if err != nil || !bytes.Equal(got, want.Data) {
			t.Errorf("tensor %s bytes %v (%v), want %v", want.Name, got, err, want.Data)
		}
	}
	if s, _ := f.String("general.architecture"); s != "llama" {
		t.Errorf("String = %q", s)
	}
	if n, ok := f.Uint("i32"); ok {
		t.Errorf("Uint of a negative value = %d, want not ok", n)
	}
	if n, _ := f.Uint("u16"); n != 700 {
		t.Errorf("Uint(u16) = %d", n)
	}
}

func TestBadFiles(t *testing.T) {
	good := encode(t)
	patch := func(off int, b ...byte) []byte {
		d := bytes.Clone(good)
		copy(d[off:], b)
		return d
	}
	var unknownValue, unknownTensor, badAlign bytes.Buffer
	// A value type of 99 is written by hand: the writer refuses it.
	unknownValue.Write([]byte("GGUF"))
	unknownValue.Write(binary.LittleEndian.AppendUint32(nil, 3))
	unknownValue.Write(binary.LittleEndian.AppendUint64(nil, 0))
	unknownValue.Write(binary.LittleEndian.AppendUint64(nil, 1))
	unknownValue.Write(binary.LittleEndian.AppendUint64(nil, 1))
	unknownValue.Write([]byte("k"))
	unknownValue.Write(binary.LittleEndian.AppendUint32(nil, 99))
	// A tensor of type 99.
	unknownTensor.Write([]byte("GGUF"))
	unknownTensor.Write(binary.LittleEndian.AppendUint32(nil, 3))
	unknownTensor.Write(binary.LittleEndian.AppendUint64(nil, 1))
	unknownTensor.Write(binary.LittleEndian.AppendUint64(nil, 0))
	unknownTensor.Write(binary.LittleEndian.AppendUint64(nil, 1))
	unknownTensor.Write([]byte("t"))
	unknownTensor.Write(binary.LittleEndian.AppendUint32(nil, 1))
	unknownTensor.Write(binary.LittleEndian.AppendUint64(nil, 4))
	unknownTensor.Write(binary.LittleEndian.AppendUint32(nil, 99))
	unknownTensor.Write(binary.LittleEndian.AppendUint64(nil, 0))
	badAlign.Write([]byte("GGUF"))
	badAlign.Write(binary.LittleEndian.AppendUint32(nil, 3))
	badAlign.Write(binary.LittleEndian.AppendUint64(nil, 0))
	badAlign.Write(binary.LittleEndian.AppendUint64(nil, 1))
	badAlign.Write(binary.LittleEndian.AppendUint64(nil, uint64(len("general.alignment"))))
	badAlign.Write([]byte("general.alignment"))
	badAlign.Write(binary.LittleEndian.AppendUint32(nil, uint32(Uint32)))
	badAlign.Write(binary.LittleEndian.AppendUint32(nil, 48))
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"bad magic", `bad magic "GGML"`, patch(0, 'G', 'G', 'M', 'L')},
		{"bad version", "version 7 is not supported", patch(4, 7)},
		{"truncated header", "truncated at byte 16 reading metadata count", good[:20]},
		{"tensor past the end", `tensor "c" ends at byte`, good[:len(good)-1]},
		{"unknown value type", "k: unknown value type 99", unknownValue.Bytes()},
		{"unknown tensor type", `tensor "t": invalid gguf file: unknown tensor type 99`, unknownTensor.Bytes()},
		{"alignment not a power of two", "general.alignment 48 is not a power of two", badAlign.Bytes()},
		{"empty", "truncated at byte 0 reading magic", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one wrapping ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

// TestEveryTruncation cuts the file at every length: each is an error,
// never a panic.
func TestEveryTruncation(t *testing.T) {
	good := encode(t)
	for n := range len(good) - 1 {
		if _, err := Read(bytes.NewReader(good[:n]), int64(n)); err == nil {
			t.Fatalf("file cut at %d of %d bytes read without error", n, len(good))
		}
	}
}

func TestWriteRefusesMismatch(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, []KV{{"x", Uint32, "no"}}, nil); err == nil || !strings.Contains(err.Error(), `metadata "x"`) {
		t.Errorf("error %v", err)
	}
	if err := Write(&b, nil, []Tensor{{Name: "t", Dims: []uint64{4}, Type: F32, Data: []byte{1}}}); err == nil || !strings.Contains(err.Error(), "1 bytes of data, want 16") {
		t.Errorf("error %v", err)
	}
}

func FuzzRead(f *testing.F) {
	kvs, ts := sample()
	var b bytes.Buffer
	if err := Write(&b, kvs, ts); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Read(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		for _, ti := range g.Tensors {
			// Sizes are checked arithmetic: the element count fits, the
			// size is the count's true size and the bytes are in the file.
			n, err := ti.Elements()
			if err != nil || n > MaxElements {
				t.Fatalf("tensor %s accepted with %d elements (%v)", ti.Name, n, err)
			}
			sz, err := ti.Type.RowBytes(n)
			if err != nil || sz != ti.Size {
				t.Fatalf("tensor %s: size %d, want RowBytes(%d) = %d (%v)", ti.Name, ti.Size, n, sz, err)
			}
			if end := new(big.Int).SetUint64(g.DataOffset); end.Add(end, new(big.Int).SetUint64(ti.Offset)).Add(end, new(big.Int).SetUint64(ti.Size)).Cmp(big.NewInt(int64(len(data)))) > 0 {
				t.Fatalf("tensor %s ends at byte %v, past %d", ti.Name, end, len(data))
			}
			if _, err := g.TensorBytes(ti); err != nil {
				t.Fatalf("tensor %s listed but unreadable: %v", ti.Name, err)
			}
		}
	})
}

// OverflowingTensor is a well-formed file with one Q8_0 tensor "evil" of
// dims [32, 16] (544 bytes), its dims then patched to [15790336,
// 1099510579201]: 2^63.9 elements, whose size wrapped to 16 bytes before
// sizes were checked, so the file loaded (issue 25, finding 6).
func OverflowingTensor(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, nil, []Tensor{{Name: "evil", Dims: []uint64{32, 16}, Type: Q8_0, Data: make([]byte, 16*34)}}); err != nil {
		t.Fatal(err)
	}
	d := b.Bytes()
	var dims []byte
	dims = binary.LittleEndian.AppendUint64(dims, 32)
	dims = binary.LittleEndian.AppendUint64(dims, 16)
	i := bytes.Index(d, append([]byte("evil\x02\x00\x00\x00"), dims...))
	if i < 0 {
		t.Fatal("tensor header not found")
	}
	binary.LittleEndian.PutUint64(d[i+8:], 15790336)
	binary.LittleEndian.PutUint64(d[i+16:], 1099510579201)
	return d
}

// TestSecurityTensorSizesDoNotWrap reproduces the overflow: the wrapped
// size (16 bytes) fits the file, so only checked arithmetic refuses it.
func TestSecurityTensorSizesDoNotWrap(t *testing.T) {
	t.Parallel()
	d := OverflowingTensor(t)
	_, err := Read(bytes.NewReader(d), int64(len(d)))
	if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 2^53 elements") {
		t.Fatalf("Read: %v, want ErrInvalid naming more than 2^53 elements", err)
	}
	for _, tc := range []struct {
		name string
		typ  TensorType
		n    uint64
	}{
		{"Q8_0 blocks", Q8_0, 17361641481138401536},
		{"F64 elements", F64, 1 << 62},
	} {
		if sz, err := tc.typ.RowBytes(tc.n); err == nil {
			t.Errorf("%s: RowBytes(%d) = %d, want an overflow error", tc.name, tc.n, sz)
		}
	}
	if n, err := (TensorInfo{Dims: []uint64{1 << 40, 1 << 40}}).Elements(); err == nil {
		t.Errorf("Elements of [2^40, 2^40] = %d, want an error", n)
	}
	if n, err := (TensorInfo{Dims: []uint64{1 << 26, 1 << 27}}).Elements(); err != nil || n != 1<<53 {
		t.Errorf("Elements of [2^26, 2^27] = %d, %v, want 2^53", n, err)
	}
}

// TestSecurityDeclaredLengthsAreNotAllocated: a string or array that
// declares more than the file holds is refused before anything of its
// declared size is allocated (it once allocated up to 1 GiB first).
// Not parallel, so that the allocation count is this test's alone.
func TestSecurityDeclaredLengthsAreNotAllocated(t *testing.T) {
	header := func(kvs uint64) *bytes.Buffer {
		var b bytes.Buffer
		b.WriteString("GGUF")
		b.Write(binary.LittleEndian.AppendUint32(nil, 3))
		b.Write(binary.LittleEndian.AppendUint64(nil, 0))
		b.Write(binary.LittleEndian.AppendUint64(nil, kvs))
		return &b
	}
	longKey := header(1)
	longKey.Write(binary.LittleEndian.AppendUint64(nil, maxStringLen))
	longKey.WriteString("k")
	longValue := header(1)
	longValue.Write(binary.LittleEndian.AppendUint64(nil, 1))
	longValue.WriteString("k")
	longValue.Write(binary.LittleEndian.AppendUint32(nil, uint32(String)))
	longValue.Write(binary.LittleEndian.AppendUint64(nil, maxStringLen-1))
	tooLong := header(1)
	tooLong.Write(binary.LittleEndian.AppendUint64(nil, 1<<30))
	bigArray := header(1)
	bigArray.Write(binary.LittleEndian.AppendUint64(nil, 1))
	bigArray.WriteString("k")
	bigArray.Write(binary.LittleEndian.AppendUint32(nil, uint32(Array)))
	bigArray.Write(binary.LittleEndian.AppendUint32(nil, uint32(Uint64)))
	bigArray.Write(binary.LittleEndian.AppendUint64(nil, maxCount))
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"key longer than the file", "bytes declared", longKey.Bytes()},
		{"value longer than the file", "bytes declared", longValue.Bytes()},
		{"string over the cap", "is too large", tooLong.Bytes()},
		{"array longer than the file", "elements declared", bigArray.Bytes()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Read(bytes.NewReader(tc.data), int64(len(tc.data)))
			runtime.ReadMemStats(&after)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Read: %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Read: %v, want it to contain %q", err, tc.want)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
				t.Errorf("reading a %d-byte file allocated %d bytes", len(tc.data), got)
			}
		})
	}
}
