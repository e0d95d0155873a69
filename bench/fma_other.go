//go:build !amd64 || purego

package bench

func fmaSteps(iters int, a, b float32) (float32, int64, bool) { return 0, 0, false }

func q8DotSteps(iters int) (float32, int64, bool) { return 0, 0, false }

func fmaLanes() int { return 8 }
