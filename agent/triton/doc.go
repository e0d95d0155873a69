// Package triton lays out a Triton replica's model repository on disk:
// the config.pbtxt the catalogue generates (catalog.TritonRepository)
// beside version 1, a link to the version's prepared files. The process
// driver writes it into the replica's directory on the node; the
// Kubernetes driver's init container (`modelplane fetch --triton-model`)
// writes it into the pod's volume, so both run Triton on the same
// repository.
//
// It owns the writing only: what the repository says is the catalogue's,
// and it must not launch, probe or download anything.
package triton
