package reputation_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

// committedDB is the test database under version control.
const committedDB = "../testdata/mmdb/GeoLite2-ASN-test.mmdb"

// writeDB writes entries to a fresh file in a temporary directory.
func writeDB(t testing.TB, entries []reputationtest.TestEntry) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "GeoLite2-ASN.mmdb")
	if err := reputationtest.WriteTestDB(path, entries); err != nil {
		t.Fatal(err)
	}
	return path
}

// openDB writes entries and opens them.
func openDB(t testing.TB, entries []reputationtest.TestEntry) (*reputation.DB, string) {
	t.Helper()
	path := writeDB(t, entries)
	db, err := reputation.OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// replace writes entries beside path, gives the file a distinct
// modification time (so the change shows even on file systems with coarse
// timestamps) and renames it over path in one step.
func replace(t testing.TB, path string, entries []reputationtest.TestEntry, step int) {
	t.Helper()
	side := path + ".side"
	if err := reputationtest.WriteTestDB(side, entries); err != nil {
		t.Fatal(err)
	}
	touch(t, side, step)
	if err := os.Rename(side, path); err != nil {
		t.Fatal(err)
	}
}

// touch sets path's modification time step seconds after a fixed instant.
func touch(t testing.TB, path string, step int) {
	t.Helper()
	mt := time.Date(2030, 1, 1, 0, 0, step, 0, time.UTC)
	if err := os.Chtimes(path, mt, mt); err != nil {
		t.Fatal(err)
	}
}

type lookupCase struct {
	ip      string
	wantASN uint32
	wantOrg string
	wantOK  bool
}

// standardCases are the answers StandardEntries must give.
var standardCases = []lookupCase{
	{"203.0.113.7", 16509, "AMAZON-02", true},
	{"203.0.113.0", 16509, "AMAZON-02", true},
	{"203.0.113.127", 16509, "AMAZON-02", true},
	{"203.0.113.128", 0, "", false},
	{"203.0.113.255", 0, "", false},
	{"198.51.100.9", 14061, "DIGITALOCEAN", true},
	{"::ffff:198.51.100.9", 14061, "DIGITALOCEAN", true},
	{"192.0.2.1", 0, "", false},
	{"10.1.2.3", 64512, "PRIVATE-TEST", true},
	{"11.0.0.1", 0, "", false},
	{"2001:db8:2::1", 64496, "EXAMPLE-V6", true},
	{"2001:db8:1::5", 16509, "AMAZON-02", true},
	{"2001:db8:1:ffff::5%eth0", 16509, "AMAZON-02", true},
	{"2001:db9::1", 0, "", false},
	{"::1", 0, "", false},
}

func checkLookups(t *testing.T, db *reputation.DB, cases []lookupCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.ip, func(t *testing.T) {
			t.Parallel()
			asn, org, ok := db.Lookup(netip.MustParseAddr(tc.ip))
			if asn != tc.wantASN || org != tc.wantOrg || ok != tc.wantOK {
				t.Errorf("Lookup(%s) = %d, %q, %v; want %d, %q, %v",
					tc.ip, asn, org, ok, tc.wantASN, tc.wantOrg, tc.wantOK)
			}
		})
	}
}

func TestDBLookup(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	checkLookups(t, db, standardCases)
	t.Run("invalid address", func(t *testing.T) {
		t.Parallel()
		if asn, org, ok := db.Lookup(netip.Addr{}); ok || asn != 0 || org != "" {
			t.Errorf("Lookup(zero Addr) = %d, %q, %v; want 0, \"\", false", asn, org, ok)
		}
	})
	t.Run("nil DB", func(t *testing.T) {
		t.Parallel()
		var nilDB *reputation.DB
		if _, _, ok := nilDB.Lookup(netip.MustParseAddr("203.0.113.7")); ok {
			t.Error("nil DB: Lookup ok")
		}
	})
}

// TestDBLookupCached checks that repeated lookups (served from the record
// cache) give the same answers as the first ones.
func TestDBLookupCached(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	for round := range 3 {
		for _, tc := range standardCases {
			asn, org, ok := db.Lookup(netip.MustParseAddr(tc.ip))
			if asn != tc.wantASN || org != tc.wantOrg || ok != tc.wantOK {
				t.Errorf("round %d: Lookup(%s) = %d, %q, %v; want %d, %q, %v",
					round, tc.ip, asn, org, ok, tc.wantASN, tc.wantOrg, tc.wantOK)
			}
		}
	}
}

// TestCommittedTestDB checks that the committed database answers as
// StandardEntries say and is what the generator writes today.
func TestCommittedTestDB(t *testing.T) {
	t.Parallel()
	db, err := reputation.OpenDB(committedDB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the parallel subtests
	checkLookups(t, db, standardCases)

	committed, err := os.ReadFile(committedDB)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := os.ReadFile(writeDB(t, reputationtest.StandardEntries()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, fresh) {
		t.Errorf("%s is stale: run go generate ./reputation/", committedDB)
	}
}

func TestDBInfo(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	info := db.Info()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != path || db.Path() != path {
		t.Errorf("Path = %q, %q; want %q", info.Path, db.Path(), path)
	}
	if want := time.Unix(reputationtest.BuildEpoch, 0).UTC(); !info.BuildTime.Equal(want) {
		t.Errorf("BuildTime = %v, want %v", info.BuildTime, want)
	}
	if info.NodeCount == 0 {
		t.Error("NodeCount = 0")
	}
	if info.DatabaseType != "GeoLite2-ASN" {
		t.Errorf("DatabaseType = %q", info.DatabaseType)
	}
	if info.Size != fi.Size() || !info.ModTime.Equal(fi.ModTime()) {
		t.Errorf("Size, ModTime = %d, %v; want %d, %v", info.Size, info.ModTime, fi.Size(), fi.ModTime())
	}
	if info.LoadedAt.IsZero() {
		t.Error("LoadedAt is zero")
	}
}

// writeOtherType writes a valid MaxMind DB that is not an ASN database.
func writeOtherType(t *testing.T, path string) {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-City", IncludeReservedNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDBErrors(t *testing.T) {
	t.Parallel()
	valid, err := os.ReadFile(committedDB)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		write       func(t *testing.T, path string) // nil: no file
		path        string                          // overrides the temp path
		wantErr     string
		wantInvalid bool
	}{
		{name: "empty path", path: "", wantErr: "empty path"},
		{name: "missing", wantErr: "no such file"},
		{
			name:    "directory",
			write:   func(t *testing.T, path string) { os.Mkdir(path, 0o755) },
			wantErr: "is a directory",
		},
		{
			name:        "empty file",
			write:       func(t *testing.T, path string) { os.WriteFile(path, nil, 0o644) },
			wantErr:     "empty file",
			wantInvalid: true,
		},
		{
			name:        "garbage",
			write:       func(t *testing.T, path string) { os.WriteFile(path, []byte("not a database\n"), 0o644) },
			wantErr:     "invalid MaxMind DB",
			wantInvalid: true,
		},
		{
			name: "truncated",
			write: func(t *testing.T, path string) {
				// Keep the metadata, lose most of the search tree.
				os.WriteFile(path, valid[len(valid)/2:], 0o644)
			},
			wantErr:     "invalid ASN database",
			wantInvalid: true,
		},
		{
			name: "corrupt search tree",
			write: func(t *testing.T, path string) {
				bad := bytes.Clone(valid)
				for i := range 64 {
					bad[i] = 0xff
				}
				os.WriteFile(path, bad, 0o644)
			},
			wantErr:     "invalid ASN database",
			wantInvalid: true,
		},
		{
			name:        "wrong database type",
			write:       writeOtherType,
			wantErr:     `database type "GeoLite2-City"`,
			wantInvalid: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "GeoLite2-ASN.mmdb")
			if tc.name == "empty path" {
				path = tc.path
			}
			if tc.write != nil {
				tc.write(t, path)
			}
			db, err := reputation.OpenDB(path)
			if err == nil {
				db.Close()
				t.Fatalf("OpenDB: no error, want %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("OpenDB error %q, want it to contain %q", err, tc.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "reputation: ") {
				t.Errorf("OpenDB error %q lacks the package prefix", err)
			}
			if got := errors.Is(err, reputation.ErrInvalidDatabase); got != tc.wantInvalid {
				t.Errorf("errors.Is(%q, ErrInvalidDatabase) = %v, want %v", err, got, tc.wantInvalid)
			}
		})
	}
}

// Entries with a different AS for 203.0.113.7 than StandardEntries.
func movedEntries() []reputationtest.TestEntry {
	return []reputationtest.TestEntry{
		{Prefix: netip.MustParsePrefix("203.0.113.0/24"), ASN: 64500, Org: "MOVED"},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), ASN: 14061, Org: "DIGITALOCEAN"},
	}
}

func wantLookup(t *testing.T, db *reputation.DB, ip string, wantASN uint32, wantOrg string) {
	t.Helper()
	asn, org, ok := db.Lookup(netip.MustParseAddr(ip))
	if asn != wantASN || org != wantOrg || ok != (wantASN != 0) {
		t.Errorf("Lookup(%s) = %d, %q, %v; want %d, %q", ip, asn, org, ok, wantASN, wantOrg)
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	wantLookup(t, db, "203.0.113.7", 16509, "AMAZON-02")

	// Unchanged file: nothing to do.
	if changed, err := db.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged file = %v, %v; want false, nil", changed, err)
	}

	// A new version is swapped in.
	replace(t, path, movedEntries(), 1)
	if changed, err := db.Reload(); !changed || err != nil {
		t.Fatalf("Reload of new file = %v, %v; want true, nil", changed, err)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")
	wantLookup(t, db, "203.0.113.200", 64500, "MOVED")
	wantLookup(t, db, "10.1.2.3", 0, "")
	if changed, err := db.Reload(); changed || err != nil {
		t.Fatalf("second Reload = %v, %v; want false, nil", changed, err)
	}

	// A corrupt file is refused and the old data stays.
	if err := os.WriteFile(path+".new", []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	changed, err1 := db.Reload()
	if changed || !errors.Is(err1, reputation.ErrInvalidDatabase) {
		t.Fatalf("Reload of corrupt file = %v, %v; want false, ErrInvalidDatabase", changed, err1)
	}
	if !strings.Contains(err1.Error(), path) {
		t.Errorf("error %q does not name the file", err1)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")
	// The same bad file is refused with the same error value.
	if changed, err2 := db.Reload(); changed || err2 != err1 {
		t.Fatalf("Reload of the same corrupt file = %v, %v; want false, %v", changed, err2, err1)
	}
	if info := db.Info(); info.Size == 7 {
		t.Errorf("Info describes the refused file: %+v", info)
	}

	// A missing file is refused too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if changed, err := db.Reload(); changed || err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Reload of missing file = %v, %v; want false, no such file", changed, err)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")

	// A good file again.
	replace(t, path, reputationtest.StandardEntries(), 2)
	if changed, err := db.Reload(); !changed || err != nil {
		t.Fatalf("Reload of repaired file = %v, %v; want true, nil", changed, err)
	}
	wantLookup(t, db, "203.0.113.7", 16509, "AMAZON-02")
}

// TestReloadInPlace checks that a file rewritten in place (same inode) is
// seen through its size and modification time.
func TestReloadInPlace(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	other := writeDB(t, movedEntries())
	data, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	touch(t, path, 5)
	if changed, err := db.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v; want true, nil", changed, err)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")
}

func TestClose(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, ok := db.Lookup(netip.MustParseAddr("203.0.113.7")); ok {
		t.Error("Lookup after Close: ok")
	}
	if _, err := db.Reload(); !errors.Is(err, reputation.ErrClosed) {
		t.Errorf("Reload after Close: %v, want ErrClosed", err)
	}
	if info := db.Info(); info.Path != path || info.NodeCount != 0 {
		t.Errorf("Info after Close = %+v", info)
	}
}

// TestReloadConcurrent swaps two versions while lookups run: every answer
// must be one of the two versions', never a torn or failed one (run with
// -race).
func TestReloadConcurrent(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	dir := t.TempDir()
	versions := [2]string{filepath.Join(dir, "a.mmdb"), filepath.Join(dir, "b.mmdb")}
	if err := reputationtest.WriteTestDB(versions[0], reputationtest.StandardEntries()); err != nil {
		t.Fatal(err)
	}
	if err := reputationtest.WriteTestDB(versions[1], movedEntries()); err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr("203.0.113.7")
	ip2 := netip.MustParseAddr("198.51.100.9")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				asn, org, ok := db.Lookup(ip)
				if !ok || !(asn == 16509 && org == "AMAZON-02" || asn == 64500 && org == "MOVED") {
					errs <- "203.0.113.7 answered " + org
					return
				}
				if asn, _, ok := db.Lookup(ip2); !ok || asn != 14061 {
					errs <- "198.51.100.9 lost its ASN"
					return
				}
			}
		}()
	}
	for i := range 50 {
		data, err := os.ReadFile(versions[(i+1)%2])
		if err != nil {
			t.Fatal(err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if changed, err := db.Reload(); !changed || err != nil {
			t.Fatalf("reload %d = %v, %v", i, changed, err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// 50 swaps, starting from version a: ends on version a.
	wantLookup(t, db, "203.0.113.7", 16509, "AMAZON-02")
}

type reloadReport struct {
	changed bool
	err     error
}

func TestWatch(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	reports := make(chan reloadReport, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Watch(ctx, time.Millisecond, func(changed bool, err error) {
			reports <- reloadReport{changed, err}
		})
	}()
	next := func() reloadReport {
		t.Helper()
		select {
		case r := <-reports:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reload reported within 10s")
			return reloadReport{}
		}
	}

	replace(t, path, movedEntries(), 1)
	if r := next(); !r.changed || r.err != nil {
		t.Fatalf("report = %+v, want changed", r)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")

	if err := os.WriteFile(path+".new", []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if r := next(); r.changed || !errors.Is(r.err, reputation.ErrInvalidDatabase) {
		t.Fatalf("report = %+v, want ErrInvalidDatabase", r)
	}
	wantLookup(t, db, "203.0.113.7", 64500, "MOVED")

	replace(t, path, reputationtest.StandardEntries(), 2)
	// The corrupt file was reported once: the next report is the repair.
	if r := next(); !r.changed || r.err != nil {
		t.Fatalf("report = %+v, want changed", r)
	}
	wantLookup(t, db, "203.0.113.7", 16509, "AMAZON-02")

	cancel()
	<-done
}

// TestWatchStopsOnClose checks that Watch returns once the DB is closed.
func TestWatchStopsOnClose(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Watch(context.Background(), time.Millisecond, nil)
	}()
	db.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch still running 10s after Close")
	}
}
