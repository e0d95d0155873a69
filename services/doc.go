// Package services holds Set, the control plane's domain services as one
// value: package controlplane builds it once, and the HTTP layer takes it
// whole instead of a hand-made copy of its fields.
//
// It owns no behaviour and must not grow any: no constructor, no I/O, no
// HTTP. It sits between the assembly and the handlers so that neither
// imports the other's direction (handlers' tests assemble a control plane,
// so the type cannot live in handlers, and handlers must not import the
// assembly).
package services
