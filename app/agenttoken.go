package app

import (
	"log/slog"
	"os"
)

// sharedAgentTokenEnv is the shared artifact credential of agents that have
// not enrolled: it reads every team's artifacts and cannot be revoked per
// node (docs/security.md, "The shared MP_AGENT_TOKEN").
const sharedAgentTokenEnv = "MP_AGENT_TOKEN"

// warnSharedAgentToken says at start that the shared token is set, what it
// allows and how to be rid of it. role is who reads it: the server accepts
// it, an agent presents it. It never prints the token.
func warnSharedAgentToken(log *slog.Logger, role string) {
	log.Warn(sharedAgentTokenEnv+" is set: whoever holds it reads every team's artifacts, and it cannot be revoked per node; "+
		"enroll every node with a join token (modelplane agent --join), then unset it (docs/security.md)",
		slog.String("role", role))
}

// dropSharedAgentToken removes MP_AGENT_TOKEN from dev's environment,
// warning when it was set: dev's nodes enroll and fetch with their own
// tokens, dev's control plane accepts no shared token, and no child dev
// starts (PostgreSQL, ClickHouse, validators, runtimes) should inherit one.
func dropSharedAgentToken(log *slog.Logger) {
	if _, ok := os.LookupEnv(sharedAgentTokenEnv); !ok {
		return
	}
	log.Warn(sharedAgentTokenEnv + " is set but dev's nodes enroll with their own tokens and dev accepts no shared one; it is removed from dev's environment")
	_ = os.Unsetenv(sharedAgentTokenEnv)
}
