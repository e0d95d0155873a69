// Package cli is modelplane's command-line client: `modelplane <noun>
// <verb>` for scripts and terminals (DESIGN.md §11). It is a client of the
// REST API under /api/v1 and of the gateway's /predict, nothing more: it
// imports no domain package and no database code (internal/arch holds it
// to that), so what it can do is what the API lets a key do.
//
// It reads where to go and with which key from --api and --key, then the
// MP_API and MP_API_KEY variables (`source .modelplane/dev.env` sets both),
// then the current context of its configuration file (`modelplane context
// use prod`, kept 0600 in the user's configuration directory); without a
// key anywhere it uses the token `modelplane login` kept there (OIDC,
// PKCE, a loopback redirect). `versions push` uploads through a resumable
// upload session, and `rollouts watch` reads the rollout's event stream.
// Output is an aligned table, or the API's own JSON (-o json) or YAML (-o
// yaml) for scripts. Exit codes are stable: 0 ok, 1 error, 2 usage, 3 not found, 4
// conflict. An API problem (application/problem+json) prints as its status,
// detail and each field it names.
package cli
