// Package atomicfile replaces a file only once its new contents are all on
// disk, so a failure at any point leaves the old file whole.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, mode perm: a temporary file in the same
// directory, created with perm, synced, then renamed over path.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// Create writes data to a new file at path, mode perm, the same way, but
// never replaces one: it fails with an error wrapping fs.ErrExist if path
// exists, whoever else creates it at the same moment.
func Create(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, func(tmp, path string) error {
		// A hard link fails if path exists; the temporary name then goes.
		if err := os.Link(tmp, path); err != nil {
			return err
		}
		return os.Remove(tmp)
	})
}

func write(path string, data []byte, perm os.FileMode, place func(tmp, path string) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("write %s (left unchanged): %w", path, err)
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return place(tmp.Name(), path)
}
