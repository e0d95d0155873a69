package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// cliLoginPath is where `modelplane login` learns whom to ask for a
// token; it needs no credential (it is how the client gets one).
const cliLoginPath = "/api/v1/auth/cli"

// CLILogin is what the command-line client needs for the OIDC
// authorization-code flow with PKCE on a loopback redirect.
type CLILogin struct {
	Issuer   string `json:"issuer" doc:"The OIDC issuer; its discovery document names the endpoints."`
	ClientID string `json:"client_id" doc:"The public client of the command-line client (no secret; PKCE S256; any loopback port)."`
}

func (s *Server) registerCLILogin(api huma.API) {
	op := s.op("auth-cli", http.MethodGet, "/auth/cli", "Where `modelplane login` signs in: the issuer and the CLI's public client", "auth")
	op.Security = []map[string][]string{} // no credential: this is how a client gets one
	op.Errors = []int{http.StatusNotFound}
	huma.Register(api, op, func(ctx context.Context, _ *struct{}) (*One[CLILogin], error) {
		if s.OIDC == nil {
			return nil, huma.Error404NotFound("command-line login is off: the server has no OIDC issuer")
		}
		issuer, client, ok := s.OIDC.CLI()
		if !ok {
			return nil, huma.Error404NotFound("command-line login is off: set MP_OIDC_CLI_CLIENT_ID on the server")
		}
		return &One[CLILogin]{Body: CLILogin{Issuer: issuer, ClientID: client}}, nil
	})
}
