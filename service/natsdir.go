package service

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// errStoreDirBusy reports an embedded NATS store directory that another
// process holds.
var errStoreDirBusy = errors.New("service: nats store dir is in use by another process")

// natsStoreDir is where the one-process default's embedded NATS server
// keeps JetStream: cfg.NATSStoreDir when set; else, with a Redis store, a
// directory derived from the Redis URL, key prefix and stream name under
// the user's cache directory, so the audit record (and the alerts) survive
// a restart as the overrides in Redis do (7.3); else "" (a temp dir, as
// the memory store survives nothing).
func natsStoreDir(cfg Config) string {
	if cfg.NATSStoreDir != "" {
		return cfg.NATSStoreDir
	}
	if cfg.RedisURL == "" {
		return ""
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = filepath.Join(os.TempDir(), fmt.Sprintf("tollgate-%d", os.Getuid()))
	}
	sum := sha256.Sum256([]byte(RedactURL(cfg.RedisURL) + "\x00" + cfg.KeyPrefix + "\x00" + cfg.StreamName))
	return filepath.Join(base, "tollgate", "nats-"+hex.EncodeToString(sum[:8]))
}

// openStoreDir creates dir (owner only) and locks it for this process;
// the returned func releases it. A directory another process holds is
// errStoreDirBusy: two NATS servers must never share a store.
func openStoreDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("service: nats store dir %s: %w", dir, err)
	}
	return lockDir(filepath.Join(dir, "tollgate.lock"))
}
