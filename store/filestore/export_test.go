//go:build linux

package filestore

// Publishing modes, for tests that take each way of publishing a claim file.
const (
	PublishEmptyPath = publishEmptyPath
	PublishProc      = publishProc
	PublishTemp      = publishTemp
)

// SetPublishing makes s publish claim files in mode from now on.
func SetPublishing(s *Store, mode int) { s.publishing.Store(int32(mode)) }

// Publishing reports how s publishes claim files now.
func Publishing(s *Store) int { return int(s.publishing.Load()) }
