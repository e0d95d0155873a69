package handlers

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"modelplane/fleet"
	"modelplane/trust"
)

type nodePath struct {
	Node string `path:"node" doc:"The node's name, as its agent registered it."`
}

// registerNodes serves the fleet to platform admins; fleet answers
// auth.ErrForbidden for everyone else, which is a 403: nodes belong to no
// team, so there is nothing to hide behind a 404.
func (s *Server) registerNodes(api huma.API) {
	huma.Register(api, s.op("nodes-list", http.MethodGet, "/nodes", "List the fleet's nodes (platform admins)", "fleet"),
		func(ctx context.Context, _ *struct{}) (*List[fleet.Node], error) {
			ns, err := s.Fleet.Nodes(ctx, principal(ctx))
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			out := &List[fleet.Node]{}
			out.Body.Items = ns
			return out, nil
		})
	huma.Register(api, s.op("node-get", http.MethodGet, "/nodes/{node}", "Get a node with its GPUs, slices and who uses them (platform admins)", "fleet"),
		func(ctx context.Context, in *nodePath) (*One[fleet.Node], error) {
			n, err := s.Fleet.Node(ctx, principal(ctx), in.Node)
			if err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[fleet.Node]{Body: n}, nil
		})
	huma.Register(api, s.op("node-attest", http.MethodPut, "/nodes/{node}/attestation",
		"Attest a node's inventory: its heartbeats are believed up to it (platform admins)", "fleet"),
		func(ctx context.Context, in *nodeAttestInput) (*One[trust.Inventory], error) {
			if err := s.Attestations.Attest(ctx, principal(ctx), in.Node, in.Body); err != nil {
				return nil, s.apiError(ctx, err)
			}
			return &One[trust.Inventory]{Body: in.Body}, nil
		})
}

type nodeAttestInput struct {
	Node string `path:"node" doc:"The node's name, as its join token names it."`
	Body trust.Inventory
}
