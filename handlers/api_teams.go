package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/auth"
	"modelplane/tenant"
)

type teamCreateInput struct {
	Body struct {
		Name        string `json:"name" doc:"DNS-label-like team name."`
		DisplayName string `json:"display_name,omitempty"`
	}
}

type teamPath struct {
	Team string `path:"team"`
}

type memberSetInput struct {
	Team string `path:"team"`
	Body struct {
		Email string `json:"email" doc:"The user's email; they must have signed in once."`
		Role  string `json:"role" enum:"admin,engineer,viewer"`
	}
}

type memberPath struct {
	Team  string `path:"team"`
	Email string `path:"email"`
}

func (s *Server) registerTeams(api huma.API) {
	huma.Register(api, s.op("teams-list", http.MethodGet, "/teams", "List teams", "teams"),
		func(ctx context.Context, in *Page) (*List[tenant.Team], error) {
			after, err := in.after()
			if err != nil {
				return nil, err
			}
			ts, err := s.Tenant.Teams(ctx, principal(ctx), after, in.Limit+1)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return page(ts, in.Limit, func(t tenant.Team) int64 { return t.ID }), nil
		})
	huma.Register(api, s.op("teams-create", http.MethodPost, "/teams", "Create a team (platform admins)", "teams"),
		func(ctx context.Context, in *teamCreateInput) (*One[tenant.Team], error) {
			t, err := s.Tenant.CreateTeam(ctx, principal(ctx), in.Body.Name, in.Body.DisplayName)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[tenant.Team]{Body: t}, nil
		})
	huma.Register(api, s.op("team-members-list", http.MethodGet, "/teams/{team}/members", "List a team's members", "teams"),
		func(ctx context.Context, in *teamPath) (*One[[]tenant.Member], error) {
			ms, err := s.Tenant.Members(ctx, principal(ctx), in.Team)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[[]tenant.Member]{Body: ms}, nil
		})
	huma.Register(api, s.op("team-members-set", http.MethodPost, "/teams/{team}/members", "Add a member or change their role (team admins)", "teams"),
		func(ctx context.Context, in *memberSetInput) (*One[tenant.Member], error) {
			m, err := s.Tenant.SetMember(ctx, principal(ctx), in.Team, in.Body.Email, auth.Role(in.Body.Role))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[tenant.Member]{Body: m}, nil
		})
	huma.Register(api, s.op("team-members-remove", http.MethodDelete, "/teams/{team}/members/{email}", "Remove a member (team admins)", "teams"),
		func(ctx context.Context, in *memberPath) (*struct{}, error) {
			if err := s.Tenant.RemoveMember(ctx, principal(ctx), in.Team, in.Email); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return nil, nil
		})
}
