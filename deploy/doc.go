// Package deploy holds what installs modelplane outside `make run`: the
// Helm chart (helm/modelplane), Prometheus rules and Grafana dashboards,
// and, in its tests, the checks that they work: the container image that
// `make images` builds, and the chart rendered by a pinned helm and applied
// to a real API server (internal/kubetest). It has no code of its own.
package deploy
