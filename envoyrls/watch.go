package envoyrls

import (
	"context"
	"crypto/sha256"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch reloads the configuration of dir (read with Options.Load) into s
// whenever a file of it changes: told by inotify (fsnotify) of every change
// in dir, the directory it links to, their subdirectories and dir's parent,
// so a Kubernetes ConfigMap's ..data swap or a RUNTIME_ROOT symlink swap is
// seen within milliseconds; and polling every interval (default 1s) as a
// safety net where inotify sees nothing (network file systems). Either way
// the files' contents are compared, so an edit that keeps the modification
// time is seen too. A directory that fails to
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
	notify := newDirNotify(dir, s.log)
	defer notify.close()
	// The first look is at once: a change made between the caller's first
	// load and this call is not missed.
	soon := time.NewTimer(0)
	defer soon.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-soon.C:
		case <-notify.events():
			// A ConfigMap update is several renames and links in a row:
			// look once they have settled, not at each.
			soon.Reset(notifySettle)
			continue
		case <-notify.errors():
			// Events were lost (a queue overflow): look now.
			soon.Reset(0)
			continue
		}
		notify.sync()
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
				s.stats.configLoaded(err)
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
		s.setConfig(cfg, !wasFirst)
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

// notifySettle is how long after a change Watch looks at the files: a
// ConfigMap swap's steps come within microseconds of each other.
const notifySettle = 2 * time.Millisecond

// dirNotify watches, with inotify, the directories whose changes can change
// a configuration directory's files: the directory, the one it links to,
// their subdirectories, and its parent (where a symlinked directory is
// swapped). Without inotify (or past the user's watch limit) it reports
// nothing, and Watch polls alone.
type dirNotify struct {
	dir     string
	log     *slog.Logger
	w       *fsnotify.Watcher
	watched map[string]bool
	failed  bool
}

func newDirNotify(dir string, log *slog.Logger) *dirNotify {
	n := &dirNotify{dir: dir, log: log, watched: map[string]bool{}}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("envoy rate limit configuration: inotify is unavailable; polling only", "dir", dir, "error", err)
		return n
	}
	n.w = w
	n.sync()
	return n
}

// events is the channel of changes; nil (never ready) without inotify.
func (n *dirNotify) events() <-chan fsnotify.Event {
	if n.w == nil {
		return nil
	}
	return n.w.Events
}

// errors is the channel of inotify's errors; nil without inotify.
func (n *dirNotify) errors() <-chan error {
	if n.w == nil {
		return nil
	}
	return n.w.Errors
}

// sync watches the directories that exist now, and stops watching the
// ones gone (a swapped-out ConfigMap version).
func (n *dirNotify) sync() {
	if n.w == nil {
		return
	}
	// Watched by their real paths: after a swap, the same name is another
	// directory, to be watched anew.
	want := map[string]bool{}
	add := func(path string) {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			want[real] = true
		}
	}
	add(filepath.Dir(n.dir))
	// A symlink on the way to dir (RUNTIME_ROOT's current, a ConfigMap's
	// ..data) is swapped in the directory that holds it.
	for p := n.dir; p != filepath.Dir(p); p = filepath.Dir(p) {
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink != 0 {
			add(filepath.Dir(p))
		}
	}
	if real, err := filepath.EvalSymlinks(n.dir); err == nil {
		_ = filepath.WalkDir(real, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				want[path] = true
			}
			return nil
		})
	}
	for path := range want {
		if n.watched[path] {
			continue
		}
		if err := n.w.Add(path); err != nil {
			if !n.failed {
				n.log.Warn("envoy rate limit configuration: cannot watch a directory with inotify; polling covers it", "path", path, "error", err)
				n.failed = true
			}
			continue
		}
		n.watched[path] = true
	}
	for path := range n.watched {
		if !want[path] {
			_ = n.w.Remove(path)
			delete(n.watched, path)
		}
	}
}

func (n *dirNotify) close() {
	if n.w != nil {
		_ = n.w.Close()
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
