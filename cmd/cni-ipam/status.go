package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// faccessat(2) flags the syscall package does not export.
const (
	atFDCWD       = -100  // AT_FDCWD: a path relative to the working directory
	atEAccess     = 0x200 // AT_EACCESS: check as the effective user, as open(2) does
	rOK, wOK, xOK = 4, 2, 1
)

// usableDir reports why the state directory dir could not serve an ADD, or
// nil, changing nothing: dir must be a directory this process may list,
// enter and write, or be missing below one it may write (ADD creates it).
func usableDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return errors.New("not a directory")
	case err == nil:
		return access(dir, "read, write and enter", rOK|wOK|xOK)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	// Missing: the nearest existing ancestor is where ADD creates it.
	for parent := filepath.Dir(dir); ; parent = filepath.Dir(parent) {
		st, err := os.Stat(parent)
		switch {
		case err == nil && !st.IsDir():
			return fmt.Errorf("cannot be created: %s is not a directory", parent)
		case err == nil:
			if err := access(parent, "write and enter", wOK|xOK); err != nil {
				return fmt.Errorf("cannot be created: %w", err)
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("cannot be created: %w", err)
		case parent == filepath.Dir(parent):
			return fmt.Errorf("cannot be created: no directory above it exists")
		}
	}
}

// access checks that this process may do what mode says to path.
func access(path, what string, mode uint32) error {
	if err := syscall.Faccessat(atFDCWD, path, mode, atEAccess); err != nil {
		return fmt.Errorf("%s: cannot %s it: %w", path, what, err)
	}
	return nil
}
