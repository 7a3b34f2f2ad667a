package main

// Command-line mistakes end with a non-zero status, what went wrong, and the
// usage that would have worked: cobra alone prints help and exits 0 for a
// mistyped subcommand of a group like "sluice tenant".

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// groupCmd is a command that only holds subcommands: run without one, or
// with an unknown one, it fails, suggesting the closest.
func groupCmd(use, short string) *cobra.Command {
	// cobra sets the suggestion distance only on the root's own lookup;
	// unset, SuggestionsFor here would match prefixes only.
	return &cobra.Command{Use: use, Short: short, Args: cobra.ArbitraryArgs, RunE: unknownSubcommand,
		SuggestionsMinimumDistance: 2}
}

func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s needs a subcommand.\n%s", subPath(cmd), subcommandUsage(cmd))
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := closest(args[0], cmd.SuggestionsFor(args[0])); len(s) > 0 {
		quoted := make([]string, len(s))
		for i, name := range s {
			quoted[i] = fmt.Sprintf("%q", name)
		}
		msg += fmt.Sprintf("; did you mean %s?", strings.Join(quoted, " or "))
	} else {
		msg += "."
	}
	return fmt.Errorf("%s\n%s", msg, subcommandUsage(cmd))
}

// subcommandUsage lists the usage line of each subcommand of cmd.
func subcommandUsage(cmd *cobra.Command) string {
	var b strings.Builder
	b.WriteString("Usage:")
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			fmt.Fprintf(&b, "\n  %s", sub.UseLine())
		}
	}
	fmt.Fprintf(&b, "\nRun '%s --help' for more.", cmd.CommandPath())
	return b.String()
}

// exactArgs is cobra.ExactArgs with a message that shows the usage.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		what := "arguments"
		if n == 1 {
			what = "argument"
		}
		return fmt.Errorf("%s takes %d %s (%s), got %d.\nUsage: %s", subPath(cmd), n, what,
			strings.Join(placeholders(cmd.Use), " "), len(args), cmd.UseLine())
	}
}

// noArgs is cobra.NoArgs with a message that shows the usage.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("%s takes no arguments, got %q.\nUsage: %s", subPath(cmd), args, cmd.UseLine())
}

// subPath is the command's path without "sluice", which main puts before
// every error already.
func subPath(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// placeholders are the <argument> names of a Use line.
func placeholders(use string) []string {
	var out []string
	for _, f := range strings.Fields(use) {
		if strings.HasPrefix(f, "<") && strings.HasSuffix(f, ">") {
			out = append(out, f)
		}
	}
	return out
}

// closest keeps the candidates nearest to typed: cobra returns every one
// within the distance, in command order ("lst" gets get, list and set).
func closest(typed string, candidates []string) []string {
	var best []string
	bestDist := -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(typed), strings.ToLower(c))
		if strings.HasPrefix(c, typed) {
			d = 0 // a prefix is what the user meant to finish
		}
		switch {
		case bestDist < 0 || d < bestDist:
			best, bestDist = []string{c}, d
		case d == bestDist:
			best = append(best, c)
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
