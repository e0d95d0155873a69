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
	for _, b := range busapi.Buckets {
		cfg := jetstream.KeyValueConfig{Bucket: b.Name, History: uint8(b.History), Storage: jetstream.FileStorage}
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return fmt.Errorf("kv bucket %s: %w", b.Name, err)
		}
	}
	for _, s := range busapi.Streams {
		cfg := jetstream.StreamConfig{
			Name:       s.Name,
			Subjects:   s.Subjects,
			Storage:    jetstream.FileStorage,
			Retention:  jetstream.LimitsPolicy,
			MaxAge:     s.MaxAge,
			Duplicates: s.Duplicates,
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("stream %s: %w", s.Name, err)
		}
	}
	return nil
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
