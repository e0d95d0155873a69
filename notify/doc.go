// Package notify delivers a team's events outside the platform: to the
// team's webhooks (each delivery an HMAC-SHA256-signed POST) and, for the
// events an on-call engineer must hear of (a rollback, a rollout waiting
// for approval, drift past its threshold, a budget passed), to
// Alertmanager's v2 API when the operator configured one.
//
// A delivery is a row of table deliveries written by Enqueue inside the
// transaction of the change the event tells of (package outbox calls it
// with the event's outbox row), so it exists exactly when the change
// committed. The Sender, a leader-only loop, claims due rows, sends them
// concurrently with a per-call timeout, and records the outcome: a 2xx is
// delivered; anything else is tried again after a growing backoff, and is
// dead after the last try, until someone redelivers it by hand. Nothing
// here runs inside a rollout or any other change: a receiver that hangs or
// fails delays only its own deliveries.
//
// Webhook secrets are sealed with the server key (MP_SECRET_KEY, Keyring)
// and shown once, at creation or rotation. Webhook addresses pass the
// operator's egress policy (package egress) when saved and when dialled.
//
// It must not import the HTTP layer, and it decides nothing about the
// changes it reports.
package notify
