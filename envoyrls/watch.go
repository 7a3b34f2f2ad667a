package envoyrls

import (
	"context"
	"crypto/sha256"
	"slices"
	"time"
)

// Watch reloads the configuration of dir (read with Options.Load) into s
// whenever a file of it changes (polling every interval, default 1s, comparing contents, so an edit
// that keeps the modification time is seen too). A directory that fails to
// load leaves the last good configuration in force, and the reason is logged.
// It returns when ctx is done.
func (s *Server) Watch(ctx context.Context, dir string, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	// The first poll reloads whatever is there, so a change made between
	// the caller's first load and this call is not missed.
	var last [32]byte
	lastErr := ""
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := fingerprint(dir, s.load)
		if err == nil && fp == last {
			continue
		}
		var cfg *Config
		if err == nil {
			cfg, err = Load(dir, s.load)
		}
		if err != nil {
			// Logged once per distinct problem, not every second.
			if err.Error() != lastErr {
				s.log.Error("envoy rate limit configuration not reloaded; keeping the last good one", "dir", dir, "error", err)
				lastErr = err.Error()
			}
			continue
		}
		first := last == [32]byte{}
		last, lastErr = fp, ""
		// The first poll reloads what the caller loaded and reported, most
		// likely: its warnings are news only if they differ.
		news := !slices.Equal(cfg.Warnings(), s.Config().Warnings())
		s.SetConfig(cfg)
		if !first {
			s.log.Info("envoy rate limit configuration reloaded", "dir", dir, "domains", cfg.Domains())
		}
		if !first || news {
			for _, w := range cfg.Warnings() {
				s.log.Warn("envoy rate limit configuration: "+w, "dir", dir)
			}
		}
	}
}

// fingerprint hashes the names and contents of the configuration files.
func fingerprint(dir string, opts LoadOptions) ([32]byte, error) {
	files, _, err := configFiles(dir, opts.IgnoreDotfiles)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return [32]byte{}, err
		}
		h.Write([]byte(f))
		h.Write([]byte{0})
		sum := sha256.Sum256(data)
		h.Write(sum[:])
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, nil
}
