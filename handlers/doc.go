// Package handlers is the HTTP layer of the control plane: the REST API under
// /api/v1 (huma, which also produces the OpenAPI document from the same
// registrations), the server-rendered portal, health and metrics. Handlers
// parse, call one domain method, map the error and render; they hold no SQL
// and no business rules. routes.go is the one route tree.
package handlers
