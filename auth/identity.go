package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"modelplane/busapi"
	"modelplane/db"
)

// maxJWKSBytes bounds the issuer's key set the publisher reads.
const maxJWKSBytes = 1 << 20

// IdentityPublisher publishes, through the outbox to KV mp_identity, what
// gateways need to accept OIDC bearer tokens with no database call: the
// issuer, the audience (the client id) and the issuer's signing keys, and
// every user's team memberships and org-wide role, keyed by a digest of
// issuer and subject. Each Publish writes only what changed since the last;
// a user who lost every membership has the entry deleted.
type IdentityPublisher struct {
	pool                      *pgxpool.Pool
	client                    *http.Client
	issuer, audience, jwksURL string
	// cliAudience is the command-line client's id ("" for none).
	cliAudience string
	// last is the payload last written per key; nil before the first
	// Publish, which writes everything.
	last map[string]string
}

// IdentityPublisher returns the publisher of this relying party's issuer.
func (o *OIDC) IdentityPublisher(pool *pgxpool.Pool) *IdentityPublisher {
	return &IdentityPublisher{pool: pool, client: o.client, issuer: o.issuer, audience: o.clientID, cliAudience: o.cliClientID, jwksURL: o.jwksURL}
}

// BeginTerm starts a leadership term: it drops what the publisher
// remembers writing and marks keys found in the bucket (Forget), so the
// term's first Publish writes every entry and deletes every key that names
// no current user. Between two terms of this control plane another may
// have led and written different entries; a memory kept across them would
// skip a user whose row now equals what this one wrote long ago, leaving
// the other's entry (such as a membership since removed) in force.
func (p *IdentityPublisher) BeginTerm(bucketKeys []string) {
	p.last = nil
	p.Forget(bucketKeys)
}

// Forget marks keys found in the bucket as published with an unknown
// value: the next Publish deletes those that name no current user, such as
// the entry of one who lost its memberships while no control plane ran.
func (p *IdentityPublisher) Forget(keys []string) {
	if p.last == nil {
		p.last = map[string]string{}
	}
	for _, k := range keys {
		if _, ok := p.last[k]; !ok {
			p.last[k] = ""
		}
	}
}

// Publish fetches the issuer's keys, reads the memberships and writes what
// changed to the outbox in one transaction; it returns how many entries it
// wrote. An unreachable issuer leaves the keys as last published and still
// publishes the memberships.
func (p *IdentityPublisher) Publish(ctx context.Context) (int, error) {
	want := map[string]string{}
	jwks, jwksErr := p.fetchJWKS(ctx)
	if jwksErr == nil {
		b, err := json.Marshal(busapi.OIDCEntry{Issuer: p.issuer, Audience: p.audience, CLIAudience: p.cliAudience, JWKS: jwks})
		if err != nil {
			return 0, fmt.Errorf("publish identity: %w", err)
		}
		want[busapi.IdentityOIDCKey] = string(b)
	} else if old, ok := p.last[busapi.IdentityOIDCKey]; ok {
		want[busapi.IdentityOIDCKey] = old
	}
	rows, err := db.New(p.pool).IdentityListMembers(ctx)
	if err != nil {
		return 0, fmt.Errorf("publish identity: %w", err)
	}
	entries := map[string]*busapi.MemberEntry{}
	var order []string
	for _, r := range rows {
		k := busapi.IdentityUserKey(r.Issuer, r.Subject)
		e := entries[k]
		if e == nil {
			e = &busapi.MemberEntry{PlatformRole: r.PlatformRole}
			entries[k] = e
			order = append(order, k)
		}
		if r.Team != "" {
			e.Teams = append(e.Teams, busapi.MemberTeam{Team: r.Team, Role: r.Role})
		}
	}
	for _, k := range order {
		b, err := json.Marshal(entries[k])
		if err != nil {
			return 0, fmt.Errorf("publish identity: %w", err)
		}
		want[k] = string(b)
	}
	written := 0
	err = db.InTx(ctx, p.pool, func(q *db.Queries) error {
		written = 0
		put := func(key, payload string) error {
			_, err := q.OutboxInsert(ctx, db.OutboxInsertParams{Subject: busapi.KVSubject(busapi.BucketIdentity, key), Payload: []byte(payload)})
			written++
			return err
		}
		for k, v := range want {
			if old, ok := p.last[k]; ok && old == v {
				continue
			}
			if err := put(k, v); err != nil {
				return err
			}
		}
		for k := range p.last {
			if _, ok := want[k]; !ok {
				// A JSON null tells the relay to delete the key.
				if err := put(k, "null"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("publish identity: %w", err)
	}
	p.last = want
	if jwksErr != nil {
		return written, fmt.Errorf("publish identity: signing keys: %w", jwksErr)
	}
	return written, nil
}

func (p *IdentityPublisher) fetchJWKS(ctx context.Context) (json.RawMessage, error) {
	if p.jwksURL == "" {
		return nil, errors.New("the issuer names no jwks_uri")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.jwksURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", p.jwksURL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes))
	if err != nil {
		return nil, err
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return nil, fmt.Errorf("GET %s: not a JSON Web Key Set", p.jwksURL)
	}
	// Compacted, so that an unchanged set is an unchanged payload.
	return json.Marshal(set)
}
