package main

import (
	"fmt"
	"time"

	"github.com/sluicelabs/sluice"
)

// defaultAuditRetention keeps about six months of catalog changes.
const defaultAuditRetention = "180d"

// auditRetention reads --audit-retention: a period such as 180d, or off
// (0 too) to keep every entry.
func (cfg serveConfig) auditRetention() (time.Duration, error) {
	switch cfg.AuditRetention {
	case "":
		cfg.AuditRetention = defaultAuditRetention
	case "off", "0":
		return 0, nil
	}
	d, err := sluice.ParseWindow(cfg.AuditRetention)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--audit-retention %q: want a period such as 180d, 4w or 2160h, or off to keep every entry", cfg.AuditRetention)
	}
	return d, nil
}

// defaultUsageRetention keeps a month of per-minute usage rollups.
const defaultUsageRetention = "30d"

// usageRetention is --usage-retention as a duration, 0 for off.
func (cfg serveConfig) usageRetention() (time.Duration, error) {
	switch cfg.UsageRetention {
	case "":
		cfg.UsageRetention = defaultUsageRetention
	case "off", "0":
		return 0, nil
	}
	d, err := sluice.ParseWindow(cfg.UsageRetention)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--usage-retention %q: want a period such as 30d, 4w or 720h, or off to keep every minute", cfg.UsageRetention)
	}
	return d, nil
}
