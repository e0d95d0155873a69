package cluster_test

import (
	"testing"

	"modelplane/internal/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }
