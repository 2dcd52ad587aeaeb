package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	policyV1 = "version: 1\nlimits: [{name: v1, by: [ip], rate: 1/s}]\n"
	policyV2 = "version: 1\nlimits: [{name: v2, by: [ip], rate: 2/s}, {name: extra, by: [user], rate: 5/s}]\n"
	policyV3 = "version: 1\nlimits: [{name: v3, by: [ip], rate: 3/s}]\n"
	badFile  = "version: 1\nlimits: [{name: broken, by: [ip], rate: 1/week}]\n"
)

// holderFixture is a policy file on disk and a Holder for it.
type holderFixture struct {
	path    string
	h       *Holder
	mu      sync.Mutex
	reloads []string // "ok NAME" or "error" per OnReload call
	tick    time.Time
}

func newHolderFixture(t *testing.T) *holderFixture {
	t.Helper()
	f := &holderFixture{path: filepath.Join(t.TempDir(), "tollgate.yaml"), tick: time.Now().Add(-time.Hour)}
	f.write(t, policyV1)
	p, err := Load(f.path)
	if err != nil {
		t.Fatal(err)
	}
	f.h = NewHolder(f.path, p, nil)
	f.h.OnReload = func(p *Policy, err error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err != nil {
			f.reloads = append(f.reloads, "error")
		} else {
			f.reloads = append(f.reloads, "ok "+p.Limits[0].Name)
		}
	}
	return f
}

// write replaces the file and moves its mtime forward, so that a change is
// visible whatever the file system's timestamp resolution.
func (f *holderFixture) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(f.path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f.tick = f.tick.Add(time.Second)
	if err := os.Chtimes(f.path, f.tick, f.tick); err != nil {
		t.Fatal(err)
	}
}

func (f *holderFixture) current() string {
	return f.h.Current().Limits[0].Name
}

func (f *holderFixture) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.reloads, ",")
}

func TestHolderCheckOnce(t *testing.T) {
	t.Parallel()
	f := newHolderFixture(t)
	steps := []struct {
		name        string
		write       string // "" = leave the file alone
		touch       bool   // bump the mtime only
		wantChanged bool
		wantErr     string
		wantCurrent string
	}{
		{name: "unchanged", wantCurrent: "v1"},
		{name: "unchanged again", wantCurrent: "v1"},
		{name: "touched, same content", touch: true, wantCurrent: "v1"},
		{name: "valid change", write: policyV2, wantChanged: true, wantCurrent: "v2"},
		{name: "settled", wantCurrent: "v2"},
		{name: "invalid change refused", write: badFile, wantChanged: true,
			wantErr: `tollgate.yaml:2: rate "1/week": want N/s, N/min, N/h or N/day (N a positive number)`, wantCurrent: "v2"},
		{name: "refused file not retried", wantCurrent: "v2"},
		{name: "fixed", write: policyV3, wantChanged: true, wantCurrent: "v3"},
		{name: "same size, new content", write: strings.Replace(policyV3, "v3", "v4", 1), wantChanged: true, wantCurrent: "v4"},
	}
	for _, s := range steps {
		if s.write != "" {
			f.write(t, s.write)
		}
		if s.touch {
			f.tick = f.tick.Add(time.Second)
			if err := os.Chtimes(f.path, f.tick, f.tick); err != nil {
				t.Fatal(err)
			}
		}
		changed, err := f.h.CheckOnce()
		if changed != s.wantChanged {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.wantChanged)
		}
		switch {
		case s.wantErr == "" && err != nil:
			t.Errorf("%s: err = %v", s.name, err)
		case s.wantErr != "" && (err == nil || !strings.HasSuffix(err.Error(), s.wantErr)):
			t.Errorf("%s: err = %v, want ...%s", s.name, err, s.wantErr)
		}
		if got := f.current(); got != s.wantCurrent {
			t.Errorf("%s: current = %s, want %s", s.name, got, s.wantCurrent)
		}
	}
	if got, want := f.log(), "ok v2,error,ok v3,ok v4"; got != want {
		t.Errorf("OnReload calls = %s, want %s", got, want)
	}
}

func TestHolderReload(t *testing.T) {
	t.Parallel()
	f := newHolderFixture(t)
	if err := f.h.Reload(); err != nil {
		t.Fatalf("Reload of the same file: %v", err)
	}
	f.write(t, badFile)
	err := f.h.Reload()
	var pe *Error
	if !errors.As(err, &pe) || pe.File != f.path || pe.Line != 2 {
		t.Errorf("Reload(bad) = %v, want an *Error at %s:2", err, f.path)
	}
	if f.current() != "v1" {
		t.Errorf("invalid file replaced the policy")
	}
	f.write(t, policyV2)
	if err := f.h.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if f.current() != "v2" || f.h.Current().Source != f.path {
		t.Errorf("current = %s from %s", f.current(), f.h.Current().Source)
	}
	// A change already reloaded by Reload is not reloaded again by CheckOnce.
	if changed, err := f.h.CheckOnce(); changed || err != nil {
		t.Errorf("CheckOnce after Reload = %v, %v", changed, err)
	}
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if err := f.h.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reload(removed) = %v", err)
	}
	if changed, err := f.h.CheckOnce(); changed || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CheckOnce(removed) = %v, %v", changed, err)
	}
	if f.current() != "v2" {
		t.Errorf("removed file replaced the policy")
	}
	if got, want := f.log(), "ok v1,error,ok v2,error"; got != want {
		t.Errorf("OnReload calls = %s, want %s", got, want)
	}
}

func TestHolderNoticesChangeBeforeFirstCheck(t *testing.T) {
	t.Parallel()
	// The file changes between Load and NewHolder: the first check must see it.
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(policyV1), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(policyV2), 0o644); err != nil {
		t.Fatal(err)
	}
	h := NewHolder(path, p, nil)
	if changed, err := h.CheckOnce(); !changed || err != nil || h.Current().Limits[0].Name != "v2" {
		t.Errorf("CheckOnce = %v, %v; current %s", changed, err, h.Current().Limits[0].Name)
	}
}

func TestHolderBuiltin(t *testing.T) {
	t.Parallel()
	h := NewHolder("", nil, nil)
	if h.Current() != Default() {
		t.Errorf("built-in holder does not hold Default()")
	}
	called := false
	h.OnReload = func(*Policy, error) { called = true }
	if err := h.Reload(); err != nil {
		t.Errorf("Reload = %v", err)
	}
	if changed, err := h.CheckOnce(); changed || err != nil {
		t.Errorf("CheckOnce = %v, %v", changed, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h.Watch(ctx, time.Millisecond) // returns at once
	if called || h.Current() != Default() {
		t.Errorf("built-in policy reloaded")
	}
}

func TestHolderWatch(t *testing.T) {
	t.Parallel()
	f := newHolderFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.h.Watch(ctx, time.Millisecond)
	}()
	f.write(t, policyV2)
	deadline := time.Now().Add(10 * time.Second)
	for f.current() != "v2" {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not reload the changed file")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if got := f.log(); got != "ok v2" {
		t.Errorf("OnReload calls = %s", got)
	}
}
