package main

import (
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/sluicelabs/sluice/envoyrls"
)

// sluice serve reads envoyproxy/ratelimit's environment variables, so that a
// Deployment written for it works by swapping the image: envoyrls.EnvTable
// says what each sets; this file hands it serve's flags.

// applyEnvoyEnv sets the flags of fs that were not given from
// envoyproxy/ratelimit's variables in lookup (envoyrls.ApplyEnv).
func applyEnvoyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) (envoyrls.EnvReport, error) {
	return envoyrls.ApplyEnv(envFlags{fs}, lookup)
}

// envFlags is a flag set as envoyrls.ApplyEnv sees it.
type envFlags struct{ fs *pflag.FlagSet }

func (e envFlags) Has(flag string) bool     { return e.fs.Lookup(flag) != nil }
func (e envFlags) Changed(flag string) bool { return e.fs.Changed(flag) }
func (e envFlags) Set(flag, value string) error {
	return e.fs.Set(flag, value)
}

// Check parses value as the flag's type would, without setting it. String
// flags take any value; they may hold a secret, so errors never quote them.
func (e envFlags) Check(flag, value string) (show bool, err error) {
	f := e.fs.Lookup(flag)
	switch f.Value.Type() {
	case "duration":
		_, err = time.ParseDuration(value)
		return true, err
	case "bool":
		_, err = strconv.ParseBool(value)
		return true, err
	case "int":
		_, err = strconv.Atoi(value)
		return true, err
	case "float64":
		_, err = strconv.ParseFloat(value, 64)
		return true, err
	case "stringToString":
		scratch := pflag.NewFlagSet("check", pflag.ContinueOnError)
		scratch.StringToString("v", nil, "")
		err = scratch.Set("v", value)
	}
	return false, err
}
