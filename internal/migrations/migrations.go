// Package migrations holds the catalog schema shared by package postgres and
// package sqlite: one numbering, one schema.
//
// Each step is a file NNNN_name.sql written in SQL both databases accept.
// Where the dialects must differ, the step is two files instead,
// NNNN_name.postgres.sql and NNNN_name.sqlite.sql, kept as small as possible.
// Steps are applied in order, each in its own transaction, and recorded in
// the schema_migrations table by each implementation's Migrate.
//
// It is a package of its own so that both implementations embed the same
// files; it imports nothing but the standard library.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Dialects this package knows.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Migration is one numbered step of the schema.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// For returns the steps for dialect, in order.
func For(dialect string) ([]Migration, error) {
	if dialect != Postgres && dialect != SQLite {
		return nil, fmt.Errorf("migrations: unknown dialect %q", dialect)
	}
	return parse(files, dialect)
}

func parse(fsys fs.FS, dialect string) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	byVersion := make(map[int]Migration)
	last := 0 // the highest step of any dialect: each dialect needs them all
	for _, file := range names {
		base := strings.TrimSuffix(file, ".sql")
		only := ""
		for _, d := range []string{Postgres, SQLite} {
			if strings.HasSuffix(base, "."+d) {
				only, base = d, strings.TrimSuffix(base, "."+d)
			}
		}
		num, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version <= 0 || len(num) != 4 {
			return nil, fmt.Errorf("migrations: file %s is not named NNNN_name.sql", file)
		}
		last = max(last, version)
		if only != "" && only != dialect {
			continue
		}
		if _, dup := byVersion[version]; dup {
			return nil, fmt.Errorf("migrations: two files for step %d (%s)", version, file)
		}
		sql, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		byVersion[version] = Migration{Version: version, Name: name, SQL: string(sql)}
	}
	out := make([]Migration, 0, len(byVersion))
	for v := 1; v <= last; v++ {
		m, ok := byVersion[v]
		if !ok {
			return nil, fmt.Errorf("migrations: step %d is missing for %s", v, dialect)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}
