package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWatchInterval is how often Watch looks at the file when given an
// interval <= 0.
const DefaultWatchInterval = 2 * time.Second

// Holder keeps the running policy and replaces it when its file changes.
// Readers call Current on every request; Reload (on SIGHUP) and Watch (on a
// file change) swap in a new policy only when the new file is valid, so an
// invalid edit never takes the running policy away.
//
// A Holder is safe for concurrent use. Set OnReload before calling Watch or
// Reload, and do not change it afterwards.
type Holder struct {
	// OnReload, when not nil, is called after each reload attempt: with the
	// new policy and a nil error on success, with the policy still in force
	// and the error on failure. Use it for metrics
	// (tollgate_policy_reloads_total) and logs.
	OnReload func(p *Policy, err error)
	// OnListReload, when not nil, is called after each attempt to reload
	// a changed list file of the policy in force: with a nil error when
	// its new entries are in force, with the error (the old entries stay)
	// otherwise. Use it for metrics (tollgate_list_reloads_total) and logs.
	OnListReload func(l *List, err error)
	// Check, when not nil, is run on each newly parsed policy before it is
	// put in force: an error (FILE:LINE, such as an alerting secret_env
	// left unset in the environment, or a concurrency limit behind Envoy)
	// refuses the reload like a parse error.
	Check func(p *Policy) error

	path   string
	logger *slog.Logger
	cur    atomic.Pointer[Policy]

	mu    sync.Mutex // serializes reloads; guards seen
	seen  fileStamp  // the file content last loaded (or refused)
	known bool       // seen's mtime and size are valid
}

// fileStamp identifies a version of the policy file.
type fileStamp struct {
	modTime time.Time
	size    int64
	sum     [32]byte
}

// NewHolder returns a Holder for the policy p, loaded from path. With path
// "" the policy is built in and never reloads; p nil then means Default().
// With a path and p nil, Current returns nil until a Reload succeeds. A nil
// logger discards logs.
func NewHolder(path string, p *Policy, logger *slog.Logger) *Holder {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if p == nil && path == "" {
		p = Default()
	}
	h := &Holder{path: path, logger: logger}
	if p != nil {
		h.cur.Store(p)
		// The file's mtime and size are left unknown so that the first
		// check hashes the file: a change between Load and NewHolder is
		// not missed.
		h.seen.sum = p.sum
	}
	return h
}

// Current returns the policy in force. It never blocks.
func (h *Holder) Current() *Policy {
	return h.cur.Load()
}

// Path returns the policy file's path ("" for the built-in policy).
func (h *Holder) Path() string {
	return h.path
}

// Reload loads the policy file again and, if it is valid, puts it in force.
// On error the running policy stays and the error (every problem as
// "FILE:LINE: ...") is returned and logged. The built-in policy has no file:
// Reload then does nothing and returns nil.
func (h *Holder) Reload() error {
	if h.path == "" {
		h.logger.Info("policy: built-in policy, nothing to reload")
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fi, err := os.Stat(h.path)
	if err != nil {
		return h.finish(nil, fmt.Errorf("policy: reload: %w", err))
	}
	data, err := readFile(h.path)
	if err != nil {
		return h.finish(nil, err)
	}
	return h.load(fi, data)
}

// CheckOnce looks whether the policy file changed since it was last loaded
// (by modification time and size, then by content hash) and, if so, reloads
// it. changed reports whether a reload was attempted; err is the reload's
// error, or the error of reading the file. A refused file is not retried
// until it changes again. Watch calls CheckOnce on every tick.
func (h *Holder) CheckOnce() (changed bool, err error) {
	if h.path == "" {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fi, err := os.Stat(h.path)
	if err != nil {
		return false, fmt.Errorf("policy: watch: %w", err)
	}
	if h.known && fi.ModTime().Equal(h.seen.modTime) && fi.Size() == h.seen.size {
		return false, nil
	}
	data, err := readFile(h.path)
	if err != nil {
		return false, err
	}
	if sha256.Sum256(data) == h.seen.sum {
		// Touched or rewritten with the same content.
		h.seen.modTime, h.seen.size, h.known = fi.ModTime(), fi.Size(), true
		return false, nil
	}
	return true, h.load(fi, data)
}

// load parses data, read from the file described by fi, and puts it in
// force if valid. h.mu must be held.
func (h *Holder) load(fi os.FileInfo, data []byte) error {
	h.seen = fileStamp{modTime: fi.ModTime(), size: fi.Size(), sum: sha256.Sum256(data)}
	h.known = true
	p, err := parse(h.path, filepath.Dir(h.path), data)
	if err == nil && h.Check != nil {
		if err = h.Check(p); err != nil {
			p = nil
		}
	}
	return h.finish(p, err)
}

// finish puts p in force (when err is nil), logs and calls OnReload.
func (h *Holder) finish(p *Policy, err error) error {
	if err != nil {
		h.logger.Error("policy: reload refused, running policy stays in force",
			"file", h.path, "error", err.Error())
		if h.OnReload != nil {
			h.OnReload(h.cur.Load(), err)
		}
		return err
	}
	h.cur.Store(p)
	h.logger.Info("policy: reloaded", "file", h.path,
		"routes", len(p.Routes), "limits", len(p.Limits))
	if h.OnReload != nil {
		h.OnReload(p, nil)
	}
	return nil
}

// Watch calls CheckOnce every interval (DefaultWatchInterval if <= 0) until
// ctx ends, reloading the policy when its file changes. Errors are logged
// (and reported to OnReload when a reload was attempted). For the built-in
// policy it returns at once.
func (h *Holder) Watch(ctx context.Context, interval time.Duration) {
	if h.path == "" && !h.hasLists() {
		return
	}
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if changed, err := h.CheckOnce(); err != nil && !changed {
				h.logger.Warn("policy: cannot check policy file", "file", h.path, "error", err.Error())
			}
			h.CheckListsOnce()
		}
	}
}

func (h *Holder) hasLists() bool {
	p := h.cur.Load()
	return p != nil && len(p.Lists) > 0
}

// CheckListsOnce looks whether a list file of the policy in force changed
// since it was last loaded (by modification time and size, then by
// content hash) and reloads each that did and has stayed unchanged since
// the previous call (so a file still being written is not loaded half
// done: a change is loaded on the second call that sees it). Valid new
// entries are put in force at once; a file that cannot be read or has a bad line
// ("FILE:LINE: ...") is logged and reported to OnListReload, and the old
// entries stay until the file changes again. It returns how many lists
// were reloaded. Watch calls it on every tick.
func (h *Holder) CheckListsOnce() (reloaded int) {
	p := h.cur.Load()
	if p == nil || len(p.Lists) == 0 {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range p.Lists {
		if h.checkList(l) {
			reloaded++
		}
	}
	return reloaded
}

// checkList reloads l if its file changed; h.mu must be held.
func (h *Holder) checkList(l *List) bool {
	fi, err := os.Stat(l.File)
	if err != nil {
		if !l.missing {
			l.missing = true
			h.listFailed(l, fmt.Errorf("policy: list %s: %w", l.Name, err))
		}
		return false
	}
	if !l.missing && l.known && fi.ModTime().Equal(l.seen.modTime) && fi.Size() == l.seen.size {
		return false
	}
	// A file being written (a download, a copy, a truncate and write)
	// must not load half-written: a change is read once the file is
	// seen unchanged on two checks in a row.
	if !l.pendingSet || !fi.ModTime().Equal(l.pending.modTime) || fi.Size() != l.pending.size {
		l.pending, l.pendingSet = fileStamp{modTime: fi.ModTime(), size: fi.Size()}, true
		return false
	}
	l.pendingSet = false
	set, sum, err := readList(l.File, l.Kind)
	if err != nil && set == nil && sum == [32]byte{} {
		if !l.missing {
			l.missing = true
			h.listFailed(l, err)
		}
		return false
	}
	l.missing = false
	stamp := fileStamp{modTime: fi.ModTime(), size: fi.Size(), sum: sum}
	if sum == l.seen.sum {
		l.seen, l.known = stamp, true
		return false
	}
	l.seen, l.known = stamp, true
	if err != nil {
		h.listFailed(l, err)
		return false
	}
	l.set.Store(set)
	h.logger.Info("policy: list reloaded", "list", l.Name, "file", l.File, "entries", set.Len())
	if h.OnListReload != nil {
		h.OnListReload(l, nil)
	}
	return true
}

// listFailed logs and reports a list reload that was refused.
func (h *Holder) listFailed(l *List, err error) {
	h.logger.Error("policy: list reload refused, old entries stay in force",
		"list", l.Name, "file", l.File, "error", err.Error())
	if h.OnListReload != nil {
		h.OnListReload(l, err)
	}
}
