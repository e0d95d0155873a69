package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/auth"
	"modelplane/tenant"
)

type keyCreateInput struct {
	Body struct {
		Name      string     `json:"name"`
		Team      string     `json:"team,omitempty" doc:"Owning team; empty for org-wide platform_admin and finance keys."`
		Role      string     `json:"role" enum:"admin,engineer,viewer,platform_admin,finance"`
		ExpiresAt *time.Time `json:"expires_at,omitempty"`
	}
}

// CreatedKey is a new key with its secret, shown this once.
type CreatedKey struct {
	tenant.Key
	Secret string `json:"key" doc:"The API key. It is shown only in this response."`
}

// createdKeyOutput is never cached nor kept for idempotent replay: it holds
// the secret.
type createdKeyOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         CreatedKey
}

type keyPath struct {
	ID int64 `path:"id"`
}

func (s *Server) registerKeys(api huma.API) {
	huma.Register(api, s.op("api-keys-list", http.MethodGet, "/api-keys", "List the API keys of teams you administer", "api-keys"),
		func(ctx context.Context, in *Page) (*List[tenant.Key], error) {
			after, err := in.after()
			if err != nil {
				return nil, err
			}
			ks, err := s.Tenant.Keys(ctx, principal(ctx), after, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(ks, in.Limit, func(k tenant.Key) int64 { return k.ID }), nil
		})
	huma.Register(api, s.op("api-keys-create", http.MethodPost, "/api-keys", "Create an API key (team admins)", "api-keys"),
		func(ctx context.Context, in *keyCreateInput) (*createdKeyOutput, error) {
			raw, k, err := s.Tenant.CreateKey(ctx, principal(ctx), tenant.KeyRequest{Name: in.Body.Name, Team: in.Body.Team,
				Role: auth.Role(in.Body.Role), ExpiresAt: in.Body.ExpiresAt})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &createdKeyOutput{CacheControl: "no-store", Body: CreatedKey{Key: k, Secret: raw}}, nil
		})
	huma.Register(api, s.op("api-keys-revoke", http.MethodDelete, "/api-keys/{id}", "Revoke an API key", "api-keys"),
		func(ctx context.Context, in *keyPath) (*One[tenant.Key], error) {
			k, err := s.Tenant.RevokeKey(ctx, principal(ctx), in.ID)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[tenant.Key]{Body: k}, nil
		})
}
