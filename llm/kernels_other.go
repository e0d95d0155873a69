//go:build !amd64 || purego

package llm

// kern is the kernel set in use: pure Go off amd64 (or with -tags purego).
var kern = goKernels

// kernelSets are the sets this build can run, for the tests.
var kernelSets = []kernelSet{goKernels}
