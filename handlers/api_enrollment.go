package handlers

import (
	"context"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/enrollment"
)

// Node enrollment: platform admins make join tokens and revoke nodes; an
// agent exchanges its join token for its credentials (POST /nodes/enroll)
// and rotates them (POST /nodes/rotate) without a user's credential: those
// two routes authenticate by the token they carry (apiAuth lets them by).

type joinTokenCreateInput struct {
	Body struct {
		Node      string `json:"node" doc:"The node's name: its key in mp_desired and its NATS user."`
		Host      string `json:"host" doc:"The host or IP address its replicas listen on; the control plane routes to no other."`
		PortFirst int    `json:"port_first,omitempty" doc:"First port replicas may listen on (with port_last; default all ports)."`
		PortLast  int    `json:"port_last,omitempty"`
		TTL       int    `json:"ttl_seconds,omitempty" minimum:"0" doc:"How long the token works, at most 7 days; default 24 hours."`
	}
}

// CreatedJoinToken is a new join token, shown this once.
type CreatedJoinToken struct {
	enrollment.JoinToken
	Token   string `json:"token" doc:"The join token. It is shown only in this response and works once."`
	Command string `json:"command" doc:"The command line that enrolls the node with it."`
}

type createdJoinTokenOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         CreatedJoinToken
}

type joinTokenPath struct {
	ID int64 `path:"id"`
}

type enrollInput struct {
	Body struct {
		Token string `json:"token" doc:"The join token (mpj_...) a platform admin made for this node."`
	}
}

type rotateInput struct {
	Authorization string `header:"Authorization" doc:"Bearer and the node's current artifact token (mpn_...)."`
}

// credentialsOutput holds secrets: never cached, never replayed.
type credentialsOutput struct {
	CacheControl string `header:"Cache-Control"`
	Body         enrollment.Credentials
}

// DefaultJoinTTL is a join token's lifetime unless the admin says.
const DefaultJoinTTL = 24 * time.Hour

// nodeAgentRoutes take no user credential: the agent's token is checked by
// the operation itself. They name the method too: GET /api/v1/nodes/enroll
// is node-get of a node named enroll, which needs a user's credential.
var nodeAgentRoutes = []string{"POST /api/v1/nodes/enroll", "POST /api/v1/nodes/rotate"}

// joinCommand is the command line a platform admin runs on the new node.
func (s *Server) joinCommand(token string) string {
	cmd := "modelplane agent --join " + token
	if s.PublicURL != "" {
		cmd += " --control-plane " + strings.TrimRight(s.PublicURL, "/")
	}
	return cmd
}

func (s *Server) registerEnrollment(api huma.API) {
	huma.Register(api, s.op("node-join-token-create", http.MethodPost, "/join-tokens", "Create a single-use join token for a node (platform admins)", "fleet"),
		func(ctx context.Context, in *joinTokenCreateInput) (*createdJoinTokenOutput, error) {
			if s.Enrollment == nil {
				return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
			}
			ttl := DefaultJoinTTL
			if in.Body.TTL > 0 {
				ttl = time.Duration(in.Body.TTL) * time.Second
			}
			token, jt, err := s.Enrollment.CreateJoinToken(ctx, principal(ctx), enrollment.JoinRequest{Node: in.Body.Node, Host: in.Body.Host,
				PortFirst: in.Body.PortFirst, PortLast: in.Body.PortLast, TTL: ttl})
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &createdJoinTokenOutput{CacheControl: "no-store", Body: CreatedJoinToken{JoinToken: jt, Token: token, Command: s.joinCommand(token)}}, nil
		})
	huma.Register(api, s.op("node-join-tokens-list", http.MethodGet, "/join-tokens", "List join tokens, never their secrets (platform admins)", "fleet"),
		func(ctx context.Context, _ *struct{}) (*List[enrollment.JoinToken], error) {
			if s.Enrollment == nil {
				return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
			}
			ts, err := s.Enrollment.JoinTokens(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[enrollment.JoinToken]{}
			out.Body.Items = ts
			return out, nil
		})
	del := s.op("node-join-token-revoke", http.MethodDelete, "/join-tokens/{id}", "Revoke an unused join token (platform admins)", "fleet")
	del.DefaultStatus = http.StatusNoContent
	huma.Register(api, del, func(ctx context.Context, in *joinTokenPath) (*struct{}, error) {
		if s.Enrollment == nil {
			return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
		}
		if err := s.Enrollment.RevokeJoinToken(ctx, principal(ctx), in.ID); err != nil {
			return nil, s.apiError(ctx, err)
		}
		return nil, nil
	})
	rev := s.op("node-revoke", http.MethodPost, "/nodes/{node}/revoke", "Revoke a node's NATS and artifact credentials at once (platform admins)", "fleet")
	rev.DefaultStatus = http.StatusNoContent
	rev.Description = "The node's NATS connection is closed and refused from then on, and its artifact token stops working, " +
		"in the same request. The node enrolls again only with a new join token."
	huma.Register(api, rev, func(ctx context.Context, in *nodePath) (*struct{}, error) {
		if s.Enrollment == nil {
			return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
		}
		if err := s.Enrollment.Revoke(ctx, principal(ctx), in.Node); err != nil {
			return nil, s.apiError(ctx, err)
		}
		return nil, nil
	})

	enroll := s.op("node-enroll", http.MethodPost, "/nodes/enroll", "Exchange a join token for the node's credentials (node agents)", "fleet")
	enroll.DefaultStatus = http.StatusOK
	enroll.Security = []map[string][]string{}
	enroll.Description = "Called by `modelplane agent --join`, with the join token in the body and no other credential. " +
		"Answers the node's NATS creds file, the NATS URLs and CA when configured, and its artifact token, once: " +
		"a used, expired or revoked token is a 401 that says which."
	huma.Register(api, enroll, func(ctx context.Context, in *enrollInput) (*credentialsOutput, error) {
		if s.Enrollment == nil {
			return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
		}
		c, err := s.Enrollment.Join(ctx, in.Body.Token, remoteHost(ctx))
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		return &credentialsOutput{CacheControl: "no-store", Body: c}, nil
	})
	rot := s.op("node-rotate", http.MethodPost, "/nodes/rotate", "Rotate the calling node's credentials (node agents)", "fleet")
	rot.DefaultStatus = http.StatusOK
	rot.Description = "Called by the agent with its current artifact token. Answers new credentials; the previous ones keep " +
		"working for the rotation grace (10 minutes), so the agent swaps them without restarting a replica."
	huma.Register(api, rot, func(ctx context.Context, in *rotateInput) (*credentialsOutput, error) {
		if s.Enrollment == nil {
			return nil, huma.Error503ServiceUnavailable("node enrollment is not configured (MP_NATS_AUTHORITY)")
		}
		token, _ := strings.CutPrefix(in.Authorization, "Bearer ")
		c, err := s.Enrollment.Rotate(ctx, token)
		if err != nil {
			return nil, s.apiError(ctx, err)
		}
		return &credentialsOutput{CacheControl: "no-store", Body: c}, nil
	})
}

// remoteHost is the address the agent's request came from (set by
// apiAuth for the node agent routes), for the audit log.
func remoteHost(ctx context.Context) string {
	h, _ := ctx.Value(keyRemoteHost).(string)
	return h
}

// withRemoteHost records r's peer address for remoteHost.
func withRemoteHost(r *http.Request) *http.Request {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		h = r.RemoteAddr
	}
	return r.WithContext(context.WithValue(r.Context(), keyRemoteHost, h))
}
