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
	s.WatchDir(ctx, dir, WatchOptions{Interval: interval})
}

// WatchOptions configure WatchDir.
type WatchOptions struct {
	// Interval is how often the directory is polled (default 1s).
	Interval time.Duration
	// OnLoad, if set, is told of every load of a changed directory: the
	// configuration now in force, or why the change was refused. A broken
	// directory is reported once per distinct error, not at every poll.
	OnLoad func(cfg *Config, err error)
}

// WatchDir is Watch with options.
func (s *Server) WatchDir(ctx context.Context, dir string, opts WatchOptions) {
	interval := opts.Interval
	if interval <= 0 {
		interval = time.Second
	}
	onLoad := opts.OnLoad
	if onLoad == nil {
		onLoad = func(*Config, error) {}
	}
	// The first poll reloads whatever is there, so a change made between
	// the caller's first load and this call is not missed.
	var last, refused [32]byte
	lastErr := ""
	// The first poll's success repeats the caller's own load: not reported.
	firstPoll := true
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := fingerprint(dir, s.load)
		wasFirst := firstPoll
		firstPoll = false
		if err == nil && (fp == last || fp == refused) {
			continue
		}
		var cfg *Config
		if err == nil {
			if cfg, err = Load(dir, s.load); err != nil {
				// The same files would fail the same way: wait for a change.
				refused = fp
			}
		}
		if err != nil {
			// Logged once per distinct problem, not every second.
			if err.Error() != lastErr {
				s.log.Error("envoy rate limit configuration not reloaded; keeping the last good one", "dir", dir, "error", err)
				lastErr = err.Error()
				onLoad(nil, err)
			}
			continue
		}
		// The first poll reloads what the caller loaded and reported, most
		// likely: its warnings are news only if they differ.
		news := !slices.Equal(cfg.Warnings(), s.Config().Warnings())
		last, refused, lastErr = fp, [32]byte{}, ""
		s.SetConfig(cfg)
		if !wasFirst {
			s.log.Info("envoy rate limit configuration reloaded", "dir", dir, "domains", cfg.Domains())
			onLoad(cfg, nil)
		}
		if !wasFirst || news {
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
