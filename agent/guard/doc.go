// Package guard owns the replica token check in front of a runtime that
// does not check the token itself (vLLM, Triton, llama.cpp's server:
// catalogue entries without ChecksToken). A Guard listens on the address
// gateways are given and forwards to the runtime on loopback; a request
// without the replica's token is 401 and never reaches the runtime, while
// the probe paths pass without it.
//
// The process driver runs a Guard inside the agent for each such replica
// on a node; the Kubernetes driver runs one as a sidecar container of the
// replica's pod (`modelplane guard`, package app). It must not import the
// agent or any control-plane package: it is the same few lines in both
// places.
package guard
