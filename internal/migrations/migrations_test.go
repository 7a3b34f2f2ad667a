package migrations

import (
	"testing"
	"testing/fstest"
)

func TestForReturnsEveryStepInOrderForBothDialects(t *testing.T) {
	for _, d := range []string{Postgres, SQLite} {
		ms, err := For(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if len(ms) == 0 {
			t.Fatalf("%s: no migrations", d)
		}
		for i, m := range ms {
			if m.Version != i+1 || m.SQL == "" {
				t.Fatalf("%s: step %d is %+v", d, i+1, m)
			}
		}
	}
}

func TestParse(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []string // SQL per step for the sqlite dialect
		wantErr bool
	}{
		{"shared_and_dialect_files", fstest.MapFS{
			"0001_a.sql": file("a"), "0002_b.postgres.sql": file("pg"), "0002_b.sqlite.sql": file("lite"),
		}, []string{"a", "lite"}, false},
		{"gap_in_numbering", fstest.MapFS{"0001_a.sql": file("a"), "0003_c.sql": file("c")}, nil, true},
		{"shared_and_dialect_file_for_one_step", fstest.MapFS{"0001_a.sql": file("a"), "0001_a.sqlite.sql": file("b")}, nil, true},
		{"bad_name", fstest.MapFS{"1_a.sql": file("a")}, nil, true},
		{"missing_dialect_file", fstest.MapFS{"0001_a.postgres.sql": file("a")}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := parse(tt.fs, SQLite)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if len(ms) != len(tt.want) {
				t.Fatalf("got %d steps, want %d", len(ms), len(tt.want))
			}
			for i, m := range ms {
				if m.SQL != tt.want[i] {
					t.Errorf("step %d SQL = %q, want %q", i+1, m.SQL, tt.want[i])
				}
			}
		})
	}
}
