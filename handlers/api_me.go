package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// MeBody describes the caller. Owner is, for an API key, the email of the
// person who made it, whose rights bound the key's; empty for a key the
// system made.
type MeBody struct {
	Name         string       `json:"name"`
	Via          string       `json:"via" enum:"session,oidc-token,api-key"`
	Owner        string       `json:"owner,omitempty"`
	PlatformRole string       `json:"platform_role,omitempty"`
	Teams        []TeamMember `json:"teams"`
}

// TeamMember is one of the caller's teams.
type TeamMember struct {
	Team string `json:"team"`
	Role string `json:"role"`
}

func (s *Server) registerMe(api huma.API) {
	huma.Register(api, s.op("me", http.MethodGet, "/me", "Who am I", "identity"),
		func(ctx context.Context, _ *struct{}) (*One[MeBody], error) {
			p := principal(ctx)
			out := &One[MeBody]{Body: MeBody{Name: p.Name, Via: p.Via, Owner: p.OwnerEmail, PlatformRole: string(p.PlatformRole), Teams: []TeamMember{}}}
			for _, m := range p.Teams {
				out.Body.Teams = append(out.Body.Teams, TeamMember{Team: m.Team, Role: string(m.Role)})
			}
			return out, nil
		})
}
