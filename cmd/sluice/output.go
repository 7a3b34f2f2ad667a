package main

// Read commands print a table for people by default, or, with -o json|yaml,
// the admin API's own spelling of what they read, for scripts: the same
// field names whether the command went through --server or --database.

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// outputFormat is the value of -o: table, json or yaml.
type outputFormat string

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "format" }

func (f *outputFormat) Set(s string) error {
	switch s {
	case "table", "json", "yaml":
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("%q is not an output format; use table, json or yaml", s)
}

// addOutputFlag gives a read command -o/--output.
func addOutputFlag(cmd *cobra.Command, f *outputFormat) {
	*f = "table"
	cmd.Flags().VarP(f, "output", "o", "output format: table, json or yaml (the admin API's field names)")
}

// render writes v in format: table calls table, json and yaml encode api.
func render(w io.Writer, format outputFormat, table func(io.Writer), api any) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(api)
	case "yaml":
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(api); err != nil {
			return err
		}
		return enc.Close()
	}
	table(w)
	return nil
}
