package migrations_test

import (
	"os"
	"testing"

	"modelplane/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}
