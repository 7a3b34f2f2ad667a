package main

import "github.com/sluicelabs/sluice/envoyrls"

// envoyFlags are the flags that select envoyproxy/ratelimit's behaviours,
// each named after the environment variable it mirrors there.
type envoyFlags struct {
	MergeDomains    bool   // --envoy-merge-domains (MERGE_DOMAIN_CONFIG)
	IgnoreDotfiles  bool   // --envoy-ignore-dotfiles (RUNTIME_IGNOREDOTFILES)
	HeaderStyle     string // --envoy-header-style: envoy or ietf
	HeaderLimit     string // --envoy-header-limit (LIMIT_LIMIT_HEADER)
	HeaderRemaining string // --envoy-header-remaining (LIMIT_REMAINING_HEADER)
	HeaderReset     string // --envoy-header-reset (LIMIT_RESET_HEADER)
	Shadow          bool   // --envoy-shadow (SHADOW_MODE)
	DynamicMetadata bool   // --envoy-dynamic-metadata (RESPONSE_DYNAMIC_METADATA)
}

// options are the server's options the flags set (envoyrls.StartService
// checks them).
func (f envoyFlags) options() envoyrls.Options {
	return envoyrls.Options{
		HeaderStyle:     envoyrls.HeaderStyle(f.HeaderStyle),
		HeaderLimit:     f.HeaderLimit,
		HeaderRemaining: f.HeaderRemaining,
		HeaderReset:     f.HeaderReset,
		Shadow:          f.Shadow,
		DynamicMetadata: f.DynamicMetadata,
		Load:            envoyrls.LoadOptions{MergeDomains: f.MergeDomains, IgnoreDotfiles: f.IgnoreDotfiles},
	}
}
