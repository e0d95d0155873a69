package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/notify"
)

type webhookCreateInput struct {
	Body struct {
		Team       string   `json:"team" minLength:"1" doc:"The team whose events the webhook receives; team admins."`
		URL        string   `json:"url" minLength:"1" doc:"Where deliveries are POSTed: https, a host on the operator's egress allow-list (MP_EGRESS_HOSTS)."`
		EventTypes []string `json:"event_types" minItems:"1" doc:"Event types to deliver (rollout.state, rollout.verdict, rollout.approval, drift.alert, drift.resolved, budget.alert), or \"*\" for all."`
	}
}

// CreatedWebhook is a new webhook with its signing secret, shown this once.
type CreatedWebhook struct {
	notify.Webhook
	Secret string `json:"secret" doc:"The HMAC-SHA256 signing secret (docs/operations.md). It is shown only in this response."`
}

// webhookSecretOutput is never cached nor kept for idempotent replay: it
// holds the secret.
type webhookSecretOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         CreatedWebhook
}

type webhookPath struct {
	Webhook int64 `path:"webhook"`
}

type deliveryListInput struct {
	Webhook int64 `path:"webhook"`
	Limit   int   `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Deliveries, newest first."`
}

type deliveryPath struct {
	Webhook  int64 `path:"webhook"`
	Delivery int64 `path:"delivery"`
}

func (s *Server) registerWebhooks(api huma.API) {
	huma.Register(api, s.op("webhook-list", http.MethodGet, "/webhooks", "The webhooks of your teams", "webhooks"),
		func(ctx context.Context, _ *struct{}) (*List[notify.Webhook], error) {
			ws, err := s.Webhooks.List(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[notify.Webhook]{}
			out.Body.Items = ws
			return out, nil
		})
	huma.Register(api, s.op("webhook-create", http.MethodPost, "/webhooks",
		"Add a webhook to a team (team admins); the answer holds its signing secret, shown once", "webhooks"),
		func(ctx context.Context, in *webhookCreateInput) (*webhookSecretOutput, error) {
			w, secret, err := s.Webhooks.Create(ctx, principal(ctx), notify.WebhookSpec{Team: in.Body.Team, URL: in.Body.URL, EventTypes: in.Body.EventTypes})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &webhookSecretOutput{CacheControl: "no-store", Body: CreatedWebhook{Webhook: w, Secret: secret}}, nil
		})
	huma.Register(api, s.op("webhook-delete", http.MethodDelete, "/webhooks/{webhook}", "Remove a webhook and its delivery log (team admins)", "webhooks"),
		func(ctx context.Context, in *webhookPath) (*struct{}, error) {
			if err := s.Webhooks.Delete(ctx, principal(ctx), in.Webhook); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
	huma.Register(api, s.op("webhook-rotate-secret", http.MethodPost, "/webhooks/{webhook}/rotate-secret",
		"Give a webhook a new signing secret (team admins); the old one signs nothing after", "webhooks"),
		func(ctx context.Context, in *webhookPath) (*webhookSecretOutput, error) {
			secret, err := s.Webhooks.RotateSecret(ctx, principal(ctx), in.Webhook)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &webhookSecretOutput{CacheControl: "no-store"}
			out.Body.ID, out.Body.Secret = in.Webhook, secret
			return out, nil
		})
	huma.Register(api, s.op("webhook-deliveries", http.MethodGet, "/webhooks/{webhook}/deliveries",
		"A webhook's deliveries, newest first: state, attempts, last status and error", "webhooks"),
		func(ctx context.Context, in *deliveryListInput) (*List[notify.Delivery], error) {
			ds, err := s.Webhooks.Deliveries(ctx, principal(ctx), in.Webhook, in.Limit)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[notify.Delivery]{}
			out.Body.Items = ds
			return out, nil
		})
	huma.Register(api, s.op("webhook-redeliver", http.MethodPost, "/webhooks/{webhook}/deliveries/{delivery}/redeliver",
		"Send a dead or delivered delivery again from its first try (team admins)", "webhooks"),
		func(ctx context.Context, in *deliveryPath) (*struct{}, error) {
			if err := s.Webhooks.Redeliver(ctx, principal(ctx), in.Webhook, in.Delivery); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
}
