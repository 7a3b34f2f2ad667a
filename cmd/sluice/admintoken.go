package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicelabs/sluice/httpapi"
)

// Where a given operator token came from, as the start log says.
const (
	tokenFromFlag = "flag" // --admin-token
	tokenFromEnv  = "env"  // SLUICE_ADMIN_TOKEN
	tokenFromFile = "file" // --admin-token-file
)

// adminToken returns the token cfg gives, its origin and setting; an empty
// token when none is given (httpapi.EnsureAdminToken settles the rest).
func (cfg serveConfig) adminToken() (httpapi.GivenAdminToken, error) {
	if cfg.AdminTokenFile != "" {
		token, err := readTokenFile(cfg.AdminTokenFile)
		return httpapi.GivenAdminToken{Token: token, Origin: tokenFromFile, Setting: tokenSettingName(tokenFromFile)}, err
	}
	if cfg.AdminToken == "" {
		return httpapi.GivenAdminToken{}, nil
	}
	origin := cfg.AdminTokenOrigin
	if origin == "" {
		origin = tokenFromFlag
	}
	return httpapi.GivenAdminToken{Token: cfg.AdminToken, Origin: origin, Setting: tokenSettingName(origin)}, nil
}

// tokenSettingName names the setting an origin stands for, for logs.
func tokenSettingName(origin string) string {
	switch origin {
	case tokenFromEnv:
		return "SLUICE_ADMIN_TOKEN"
	case tokenFromFile:
		return "--admin-token-file"
	default:
		return "--admin-token"
	}
}

// readTokenFile reads the operator token from path: its content without
// surrounding whitespace (a trailing newline is usual in a secret file).
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read --admin-token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("--admin-token-file %s is empty", path)
	}
	return token, nil
}
