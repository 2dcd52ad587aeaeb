//go:build !unix

package service

import "fmt"

// lockDir cannot lock a directory on this system: a stable store dir is
// refused as busy, and the embedded server keeps a temp dir.
func lockDir(path string) (func(), error) {
	return nil, fmt.Errorf("%w: %s (no file locks on this system)", errStoreDirBusy, path)
}
