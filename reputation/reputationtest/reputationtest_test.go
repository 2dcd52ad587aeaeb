package reputationtest_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

func TestWriteTestDB(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		path    func(dir string) string
		entries []reputationtest.TestEntry
		wantErr string
	}{
		{name: "standard", entries: reputationtest.StandardEntries()},
		{name: "empty", entries: nil},
		{
			name:    "invalid prefix",
			entries: []reputationtest.TestEntry{{ASN: 1, Org: "X"}},
			wantErr: `entry AS1 "X": invalid prefix`,
		},
		{
			name:    "missing directory",
			path:    func(dir string) string { return filepath.Join(dir, "no", "db.mmdb") },
			entries: reputationtest.StandardEntries(),
			wantErr: "reputationtest: write",
		},
		{
			name:    "whole ipv6 space",
			entries: []reputationtest.TestEntry{{Prefix: netip.MustParsePrefix("::/0"), ASN: 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "db.mmdb")
			if tc.path != nil {
				path = tc.path(dir)
			}
			err := reputationtest.WriteTestDB(path, tc.entries)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("WriteTestDB error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("mode %v, want 0644", fi.Mode().Perm())
			}
			left, _ := filepath.Glob(filepath.Join(dir, "*.tmp*"))
			if len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

func TestStandardEntriesIsACopy(t *testing.T) {
	t.Parallel()
	a := reputationtest.StandardEntries()
	a[0].ASN = 1
	if b := reputationtest.StandardEntries(); b[0].ASN == 1 {
		t.Error("StandardEntries shares its slice")
	}
}
