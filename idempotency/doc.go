// Package idempotency keeps the API's Idempotency-Key records in
// PostgreSQL: a POST's key is claimed before the handler runs, its response
// stored once the handler finished, and a retry with the same key replays
// that response. It owns the idempotency_keys table and its expiry (Sweep).
//
// It stores and returns records; deciding what a retry gets (replay, 409 in
// progress, 422 different request) and hashing requests are the HTTP
// layer's. It must not import chi, templ or handlers.
package idempotency
