package main

import "github.com/sluicelabs/sluice/httpapi"

// adminToken returns the token cfg gives, its origin (flag, env or file, as
// the start log says) and setting; an empty token when none is given
// (httpapi.EnsureAdminToken settles the rest).
func (cfg serveConfig) adminToken() (httpapi.GivenAdminToken, error) {
	switch {
	case cfg.AdminTokenFile != "":
		return httpapi.AdminTokenFile(cfg.AdminTokenFile)
	case cfg.AdminToken == "":
		return httpapi.GivenAdminToken{}, nil
	case cfg.AdminTokenOrigin == "env":
		return httpapi.GivenAdminToken{Token: cfg.AdminToken, Origin: "env", Setting: "SLUICE_ADMIN_TOKEN"}, nil
	}
	return httpapi.GivenAdminToken{Token: cfg.AdminToken, Origin: "flag", Setting: "--admin-token"}, nil
}
