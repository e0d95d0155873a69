//go:build !amd64 || purego

package bench

func streamKernel() string { return "go" }

func streamRead(b []byte) uint64 { return streamReadGo(b) }

func streamRows(b []byte, k, rowBytes, dist int) (uint64, bool) { return 0, false }
