// Package handlers is the HTTP layer of the control plane: the REST API under
// /api/v1 (huma, which also produces the OpenAPI document from the same
// registrations), the server-rendered portal, health and metrics. Handlers
// parse, call one domain method, map the error and render; they hold no SQL
// and no business rules. routes.go is the one route tree.
//
// A portal request is framed once: the session middleware loads the page
// frame (user, session, active team, flash; the team list only when a page
// renders it) and handlers read it with pageFrame. {endpoint}, {model} and
// {rollout} are loaded and authorised once by the extract middleware of
// params.go and read with endpointParam, modelParam and rolloutParam.
// Handlers take the control plane's services whole (Deps embeds
// *services.Set) and one quartz.Clock.
package handlers
