package main

import (
	"strings"

	"github.com/sluicelabs/sluice/postgres"
)

// catalogRetry says which errors of the catalog at url a start waits
// through: PostgreSQL's unreachability; nothing on SQLite, a local file.
func catalogRetry(url string) func(error) bool {
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return func(error) bool { return false }
	}
	return postgres.Unreachable
}
