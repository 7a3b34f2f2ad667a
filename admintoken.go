package sluice

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// AdminTokenPrefix starts generated operator tokens, so they are
// recognisable and never mistaken for a tenant API key (APIKeyPrefix).
const AdminTokenPrefix = "sat_"

// minAdminTokenLength and minAdminTokenDistinct bound an operator token from
// below: 32 characters of hex, the shortest thing `openssl rand -hex 16`
// gives, is 128 bits; a token of few distinct characters is not random
// whatever its length.
const (
	minAdminTokenLength   = 32
	minAdminTokenDistinct = 10
)

// CheckAdminTokenStrength refuses an operator token too weak to guard the
// catalog.
func CheckAdminTokenStrength(token string) error {
	if len(token) < minAdminTokenLength {
		return fmt.Errorf("the admin token is too short (%d characters): use at least %d random characters, e.g. from openssl rand -hex 32", len(token), minAdminTokenLength)
	}
	distinct := map[rune]bool{}
	for _, r := range token {
		distinct[r] = true
	}
	if len(distinct) < minAdminTokenDistinct {
		return fmt.Errorf("the admin token repeats too few characters (%d distinct) to be random: use e.g. openssl rand -hex 32", len(distinct))
	}
	return nil
}

// AdminTokenResult is what EnsureAdminToken did. Its zero value: the token
// given (or, with none given, the stored one) is in force and nothing else
// changed.
type AdminTokenResult struct {
	// Replaced: the token given replaced a different stored one, which no
	// longer works.
	Replaced bool
	// Generated is the token made now, none given and none stored: only its
	// hash is stored, so the caller shows it once.
	Generated string
	// Lost: none given and none stored, but another instance starting at
	// the same time stored its own generated token first; that one is in
	// force, and the one made here was discarded.
	Lost bool
}

// EnsureAdminToken makes sure catalog holds an operator token hash. A token
// given (non-empty) is checked for strength and replaces the stored one. With
// none given and none stored, one is generated and its hash stored; of
// instances doing so at once on an empty catalog exactly one keeps its own
// (Catalog.SetAdminTokenHashIfAbsent), so no operator is shown a token that
// fails.
func EnsureAdminToken(ctx context.Context, catalog Catalog, given string) (AdminTokenResult, error) {
	if given != "" {
		if err := CheckAdminTokenStrength(given); err != nil {
			return AdminTokenResult{}, err
		}
		want := HashAPIKey(given)
		stored, err := catalog.AdminTokenHash(ctx)
		if err == nil && string(stored) == string(want) {
			return AdminTokenResult{}, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return AdminTokenResult{}, fmt.Errorf("read the admin token hash: %w", err)
		}
		if err := catalog.SetAdminTokenHash(ctx, want); err != nil {
			return AdminTokenResult{}, fmt.Errorf("store the admin token hash: %w", err)
		}
		return AdminTokenResult{Replaced: err == nil}, nil // err == nil: a different one was stored
	}
	_, err := catalog.AdminTokenHash(ctx)
	if err == nil {
		return AdminTokenResult{}, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return AdminTokenResult{}, fmt.Errorf("read the admin token hash: %w", err)
	}
	token := NewAdminToken()
	stored, err := catalog.SetAdminTokenHashIfAbsent(ctx, HashAPIKey(token))
	if err != nil {
		return AdminTokenResult{}, fmt.Errorf("store the admin token hash: %w", err)
	}
	if !stored {
		return AdminTokenResult{Lost: true}, nil
	}
	return AdminTokenResult{Generated: token}, nil
}

// NewAdminToken returns a new operator token: AdminTokenPrefix and 256
// random bits.
func NewAdminToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return AdminTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}
