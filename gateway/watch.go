package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// configSettle is how long a burst of file events must go quiet before the
// file is read: an editor or a ConfigMap update writes in several steps.
const configSettle = 100 * time.Millisecond

// WatchConfigFile sends on the returned channel whenever the contents of
// path change. It watches the file's directory, not the file: editors
// replace files by rename, and Kubernetes updates a mounted ConfigMap by
// swapping a symlink (..data) in that directory, so a watch on the file
// itself would go deaf after the first change. When path is a symlink, the
// directory of its target is watched too. Contents are compared, so events
// that change nothing (a chmod, another file of the directory) are not
// reloads. It stops when ctx ends. The gateway reloads on each (Reload).
func WatchConfigFile(ctx context.Context, path string, log *slog.Logger) (<-chan struct{}, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	dirs := map[string]bool{filepath.Dir(path): true}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		dirs[filepath.Dir(target)] = true
	}
	for dir := range dirs {
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch the directory of %s: %w", path, err)
		}
	}
	last := fileDigest(path)
	changed := make(chan struct{}, 1)
	go func() {
		defer w.Close()
		settle := time.NewTimer(time.Hour)
		settle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				settle.Reset(configSettle)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("watching the configuration file failed; SIGHUP still reloads it", "config", path, "error", err)
			case <-settle.C:
				// After a symlink swap the target lives in a new
				// directory: watch it too (adding a watched one is a no-op).
				if target, err := filepath.EvalSymlinks(path); err == nil {
					_ = w.Add(filepath.Dir(target))
				}
				digest := fileDigest(path)
				if digest == nil || bytes.Equal(digest, last) {
					continue // gone for a moment mid-swap, or unchanged
				}
				last = digest
				select {
				case changed <- struct{}{}:
				default: // a reload is already pending; it reads the latest file
				}
			}
		}
	}()
	return changed, nil
}

// fileDigest hashes the contents of path; nil when it cannot be read.
func fileDigest(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(b)
	return sum[:]
}
