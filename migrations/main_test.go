package migrations_test

import (
	"os"
	"testing"

	"modelplane/internal/chtest"
	"modelplane/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	chtest.Stop()
	os.Exit(code)
}
