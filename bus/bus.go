// Package bus sets up the JetStream side of the NATS contract in busapi:
// it creates or updates the KV buckets and streams. The control plane calls
// Ensure at start; tests call it on their embedded server. It owns no messages
// and no consumers.
package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"modelplane/busapi"
)

// Ensure creates every bucket and stream of the contract, updating settings
// that changed. It is safe to call from several processes at once.
func Ensure(ctx context.Context, js jetstream.JetStream) error {
	return EnsureContract(ctx, js, busapi.Buckets, busapi.Streams)
}

// EnsureContract is Ensure for the buckets and streams given: tests size
// them down to flood them.
func EnsureContract(ctx context.Context, js jetstream.JetStream, buckets []busapi.Bucket, streams []busapi.Stream) error {
	for _, b := range buckets {
		cfg := jetstream.KeyValueConfig{Bucket: b.Name, History: uint8(b.History), Storage: jetstream.FileStorage, MaxBytes: orNoLimit(b.MaxBytes), TTL: b.TTL}
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("kv bucket %s: %w", b.Name, err)
		}
		if b.MaxConsumers > 0 {
			// A KV bucket's settings have no consumer cap; its stream's do.
			if err := capConsumers(ctx, js, "KV_"+b.Name, b.MaxConsumers); err != nil {
				return fmt.Errorf("kv bucket %s: %w", b.Name, err)
			}
		}
	}
	for _, s := range streams {
		cfg := jetstream.StreamConfig{
			Name:              s.Name,
			Subjects:          s.Subjects,
			Storage:           jetstream.FileStorage,
			Retention:         jetstream.LimitsPolicy,
			MaxAge:            s.MaxAge,
			Duplicates:        s.Duplicates,
			MaxBytes:          orNoLimit(s.MaxBytes),
			MaxMsgSize:        int32(orNoLimit(int64(s.MaxMsgSize))),
			MaxMsgsPerSubject: orNoLimit(s.MaxMsgsPerSubject),
			// Full, a stream drops its oldest messages (of the subject,
			// for MaxMsgsPerSubject): publishers are never refused for room.
			Discard: jetstream.DiscardOld,
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	return nil
}

// capConsumers sets the consumer cap of stream.
func capConsumers(ctx context.Context, js jetstream.JetStream, stream string, n int) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if info.Config.MaxConsumers == n {
		return nil
	}
	cfg := info.Config
	cfg.MaxConsumers = n
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// orNoLimit is v, or JetStream's -1 (no limit) for 0.
func orNoLimit(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// Account limits beside the sum of the contract's sizes (AccountDiskBytes).
const (
	// AccountHeadroomBytes is disk beyond the buckets and streams of the
	// contract, for streams made outside it (a benchmark's scratch stream)
	// and a message in flight while a full stream drops its oldest.
	AccountHeadroomBytes = 1 << 30
	// AccountMaxStreams bounds the account's streams and buckets.
	AccountMaxStreams = 64
	// AccountMaxConsumers bounds the account's consumers: a KV watch is
	// one (each gateway has three, each agent one), ingest's durables a
	// handful. A credential that creates consumers without end is stopped
	// there instead of at the server's memory.
	AccountMaxConsumers = 10_000
	// AccountMaxMemoryBytes bounds memory storage; the contract uses none.
	AccountMaxMemoryBytes = 64 << 20
)

// AccountLimits are the JetStream limits of the modelplane account: disk
// for the buckets and streams given, each bounded by its own MaxBytes,
// plus AccountHeadroomBytes. Since every stream of the contract drops its
// oldest messages when full, a flood of one stream never reaches the
// account's limit, and writes to the others (routes, keys, desired replica
// sets) keep their room.
func AccountDiskBytes(buckets []busapi.Bucket, streams []busapi.Stream) int64 {
	disk := int64(AccountHeadroomBytes)
	for _, b := range buckets {
		disk += b.MaxBytes
	}
	for _, s := range streams {
		disk += s.MaxBytes
	}
	return disk
}

// Keys returns a function that lists the keys of KV bucket: what a
// leader-only publisher needs to learn at the start of a term.
func Keys(js jetstream.JetStream, bucket string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			return nil, err
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		return keys, nil
	}
}
