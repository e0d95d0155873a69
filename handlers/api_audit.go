package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/audit"
)

type auditInput struct {
	Page
	Action     string `query:"action" doc:"Only this action, e.g. endpoint.create."`
	ObjectType string `query:"object_type" doc:"Only this object type, e.g. endpoint."`
	Actor      string `query:"actor" doc:"Only changes by this actor."`
}

func (s *Server) registerAudit(api huma.API) {
	huma.Register(api, s.op("audit-list", http.MethodGet, "/audit", "The audit log of teams you administer, newest first", "audit"),
		func(ctx context.Context, in *auditInput) (*List[audit.Row], error) {
			before, err := in.after()
			if err != nil {
				return nil, err
			}
			rows, err := s.Audit.List(ctx, principal(ctx), audit.Filter{Action: in.Action, ObjectType: in.ObjectType,
				Actor: in.Actor, BeforeID: before, Limit: in.Limit + 1})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(rows, in.Limit, func(r audit.Row) int64 { return r.ID }), nil
		})
}
