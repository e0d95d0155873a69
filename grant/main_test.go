package grant_test

import (
	"testing"

	"modelplane/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
