package busapi_test

import (
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"

	"modelplane/busapi"
)

// carriesEveryField round-trips 200 values of T whose every field, nested
// ones too, is drawn at random: a field added to T that its binary form
// does not carry fails it. roundTrip encodes a value and decodes it;
// normal makes a value's empty slices nil, as the binary forms do.
func carriesEveryField[T any](t *testing.T, roundTrip func(T) (T, error), normal func(T) T) {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	typ := reflect.TypeFor[T]()
	for i := range 200 {
		v, ok := quick.Value(typ, r)
		if !ok {
			t.Fatalf("no random %v", typ)
		}
		want := v.Interface().(T)
		got, err := roundTrip(want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normal(got), normal(want)) {
			t.Fatalf("value %d decoded to %#v, want %#v", i, got, want)
		}
	}
}

// refusesEveryCut checks that every shorter prefix of data, data with a
// byte more and the JSON batch json are errors from decode, not a panic or
// a batch.
func refusesEveryCut[T any](t *testing.T, data []byte, json string, decode func([]byte) (T, error)) {
	t.Helper()
	for n := range len(data) {
		if got, err := decode(data[:n]); err == nil {
			t.Fatalf("%d of %d bytes decoded to %+v", n, len(data), got)
		}
	}
	if _, err := decode(append(data, 0)); err == nil {
		t.Fatal("a trailing byte decoded")
	}
	if _, err := decode([]byte(json)); err == nil {
		t.Fatal("JSON decoded as a binary batch")
	}
}

// fuzzRoundTrip fuzzes decode from seeds: no input panics, and what decodes
// encodes to a message that decodes to the same value, compared encoded so
// that every float is compared by its bits (a NaN is not equal to itself).
// encode is false for a value too big for one message, which no gateway
// or agent sends.
func fuzzRoundTrip[T any](f *testing.F, seeds [][]byte, decode func([]byte) (T, error), encode func(T) ([]byte, bool)) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decode(data)
		if err != nil {
			return
		}
		once, ok := encode(got)
		if !ok {
			return
		}
		back, err := decode(once)
		if err != nil {
			t.Fatalf("a decoded value encodes to one that does not decode: %v", err)
		}
		if twice, _ := encode(back); string(twice) != string(once) {
			t.Fatalf("decoded again to %q, want %q", twice, once)
		}
	})
}

// batchBody is a gateway's message body of items of type T (SampleBody,
// StatsBody).
type batchBody[T any] interface {
	Add(*T) bool
	Len() int
	Message(id, gateway string) []byte
}

// bodyMessage is the message b makes of items, with id and gateway; ok is
// false when they do not fit one.
func bodyMessage[T any](b batchBody[T], id, gateway string, items []T) ([]byte, bool) {
	for i := range items {
		if !b.Add(&items[i]) {
			return nil, false
		}
	}
	return b.Message(id, gateway), true
}

// bodySeeds are fuzzing seeds of b's messages: each of items alone, all of
// them together, and magic with a cut short head.
func bodySeeds[T any](b batchBody[T], items []T, magic string) [][]byte {
	var seeds [][]byte
	for i := range items {
		msg, _ := bodyMessage(b, "b", "g", items[i:i+1])
		seeds = append(seeds, msg)
	}
	all, _ := bodyMessage(b, "b1", "gw-1", items)
	return append(seeds, all, []byte(magic+"\x00\x00\x05"))
}

// fillsToTheBound fills b with item past BatchMaxBytes: the items that fit
// make a message within it that decode reads back as as many; the one
// refused leaves b as it was, and the first, big, always fits.
func fillsToTheBound[T any](t *testing.T, b batchBody[T], item, big T, decode func([]byte) (int, error)) {
	t.Helper()
	n := 0
	for b.Add(&item) {
		n++
	}
	if b.Len() != n || n < 2 {
		t.Fatalf("Len %d after %d added", b.Len(), n)
	}
	data := b.Message("b1", "gw-1")
	got, err := decode(data)
	if err != nil || len(data) > busapi.BatchMaxBytes || got != n {
		t.Fatalf("a message of %d bytes with %d of %d items: %v", len(data), got, n, err)
	}
	if !b.Add(&big) || b.Len() != 1 {
		t.Fatal("the first item does not fit")
	}
}
