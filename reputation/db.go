package reputation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oschwald/geoip2-golang/v2"
	"github.com/oschwald/maxminddb-golang/v2"
)

// Sentinel errors.
var (
	// ErrInvalidDatabase wraps every refusal of a database file that could
	// be read: not a MaxMind DB, corrupt, or not an ASN database.
	ErrInvalidDatabase = errors.New("reputation: invalid ASN database")
	// ErrClosed is returned by Reload after Close.
	ErrClosed = errors.New("reputation: database closed")
)

// asnDatabaseTypes are the database types that carry
// autonomous_system_number and autonomous_system_organization records
// (the ones geoip2's Reader.ASN accepts).
var asnDatabaseTypes = map[string]bool{
	"GeoLite2-ASN":                        true,
	"DBIP-ASN-Lite (compat=GeoLite2-ASN)": true,
	"GeoIP2-ISP":                          true,
	"GeoIP2-Precision-ISP":                true,
}

// cacheBits sizes the per-reader record cache: 1<<cacheBits slots of one
// pointer each (64 KiB on 64-bit systems).
const cacheBits = 13

// DB is a MaxMind ASN database with hot reload. It is safe for concurrent
// use: lookups never block, and Reload and Close are serialized.
//
// The zero value is not usable; a nil *DB answers every Lookup with
// ok false. Build one with OpenDB.
type DB struct {
	path string
	cur  atomic.Pointer[dbState] // nil after Close

	mu     sync.Mutex // guards the fields below; held by Reload and Close
	closed bool
	// failStamp and failErr remember the last refused file, so that an
	// unchanged bad file is not re-read on every Reload.
	failStamp fileStamp
	failErr   error
}

// DBInfo describes the database a DB is serving.
type DBInfo struct {
	// Path is the file the DB was opened from.
	Path string
	// DatabaseType is the file's database type ("GeoLite2-ASN").
	DatabaseType string
	// BuildTime is when the database was built (its build_epoch), UTC.
	BuildTime time.Time
	// NodeCount is the number of nodes in the database's search tree.
	NodeCount uint
	// Size is the file's size in bytes, ModTime its modification time when
	// it was read.
	Size    int64
	ModTime time.Time
	// LoadedAt is when this version of the file was loaded (wall clock).
	LoadedAt time.Time
}

// dbState is one loaded version of the file. It is immutable but for the
// record cache, whose slots are atomic.
type dbState struct {
	reader *maxminddb.Reader
	stamp  fileStamp
	info   DBInfo
	cache  [1 << cacheBits]atomic.Pointer[record]
}

// record is one decoded data record, cached by its offset in the database.
type record struct {
	offset uintptr
	asn    uint32
	org    string
}

// fileStamp identifies a version of the file: the same inode, size and
// modification time mean the same content.
type fileStamp struct {
	fi   os.FileInfo
	size int64
	mod  time.Time
}

// same reports whether s and o name the same version of the file.
func (s fileStamp) same(o fileStamp) bool {
	if s.fi == nil || o.fi == nil {
		return s.fi == nil && o.fi == nil
	}
	return os.SameFile(s.fi, o.fi) && s.size == o.size && s.mod.Equal(o.mod)
}

// OpenDB reads the ASN database at path into memory, verifies it and
// returns a DB serving it. The file must be a GeoLite2-ASN,
// DBIP-ASN-Lite (GeoLite2-ASN compatible), GeoIP2-ISP or
// GeoIP2-Precision-ISP database; any other file is refused with an error
// wrapping ErrInvalidDatabase.
func OpenDB(path string) (*DB, error) {
	if path == "" {
		return nil, errors.New("reputation: open ASN database: empty path")
	}
	st, err := load(path)
	if err != nil {
		return nil, err
	}
	d := &DB{path: path}
	d.cur.Store(st)
	return d, nil
}

// load reads, verifies and indexes the file at path.
func load(path string) (*dbState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reputation: open ASN database: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reputation: stat ASN database %s: %w", path, err)
	}
	// Read through the open descriptor, so that the stamp describes exactly
	// the bytes read even if the file is replaced meanwhile.
	buf := make([]byte, 0, fi.Size()+1)
	buf, err = readAll(f, buf)
	if err != nil {
		return nil, fmt.Errorf("reputation: read ASN database %s: %w", path, err)
	}
	st, err := parse(path, buf)
	if err != nil {
		return nil, err
	}
	st.stamp = fileStamp{fi: fi, size: fi.Size(), mod: fi.ModTime()}
	st.info.Size = int64(len(buf))
	st.info.ModTime = fi.ModTime().UTC()
	return st, nil
}

// readAll appends r's content to buf.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// parse opens and verifies the database in buf. The reader keeps buf.
func parse(path string, buf []byte) (*dbState, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("%w %s: empty file", ErrInvalidDatabase, path)
	}
	r, err := maxminddb.OpenBytes(buf)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidDatabase, path, err)
	}
	if t := r.Metadata.DatabaseType; !asnDatabaseTypes[t] {
		return nil, fmt.Errorf("%w %s: database type %q, want GeoLite2-ASN or GeoIP2-ISP",
			ErrInvalidDatabase, path, t)
	}
	// Verify walks the whole search tree and data section: a truncated or
	// corrupt file is refused here, not on some later lookup.
	if err := r.Verify(); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidDatabase, path, err)
	}
	return &dbState{
		reader: r,
		info: DBInfo{
			Path:         path,
			DatabaseType: r.Metadata.DatabaseType,
			BuildTime:    r.Metadata.BuildTime().UTC(),
			NodeCount:    r.Metadata.NodeCount,
			LoadedAt:     time.Now().UTC(),
		},
	}, nil
}

// Lookup returns the autonomous system of ip: its number and organization.
// ok is false when the database has no AS number for ip, when ip is not
// valid, and when d is nil or closed. An IPv4-mapped IPv6 address is looked
// up as IPv4. Lookups of networks seen before (per loaded version) do not
// allocate.
func (d *DB) Lookup(ip netip.Addr) (asn uint32, org string, ok bool) {
	if d == nil || !ip.IsValid() {
		return 0, "", false
	}
	st := d.cur.Load()
	if st == nil {
		return 0, "", false
	}
	return st.lookup(ip.Unmap())
}

// lookup answers Lookup from one loaded version.
func (st *dbState) lookup(ip netip.Addr) (uint32, string, bool) {
	res := st.reader.Lookup(ip)
	if !res.Found() {
		return 0, "", false
	}
	off := res.Offset()
	slot := &st.cache[(uint64(off)*0x9E3779B97F4A7C15)>>(64-cacheBits)]
	if rec := slot.Load(); rec != nil && rec.offset == off {
		return rec.asn, rec.org, rec.asn != 0
	}
	var v geoip2.ASN
	if err := res.Decode(&v); err != nil {
		// Verify accepted the file, so this is a record of an unexpected
		// shape: treat it as unknown, and do not cache it.
		return 0, "", false
	}
	rec := &record{offset: off, org: v.AutonomousSystemOrganization}
	if v.AutonomousSystemNumber <= 1<<32-1 {
		rec.asn = uint32(v.AutonomousSystemNumber)
	}
	slot.Store(rec)
	return rec.asn, rec.org, rec.asn != 0
}

// Reload re-reads the database file if it changed (another inode, size or
// modification time) and swaps it in atomically; lookups in flight finish
// on the old version. changed reports a swap. On error the version in
// service stays: a missing, unreadable or invalid file is refused. An
// invalid file is refused again, with the same error value and without
// being read again, until it changes; an I/O failure is retried.
func (d *DB) Reload() (changed bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, ErrClosed
	}
	cur := d.cur.Load()
	fi, err := os.Stat(d.path)
	if err != nil {
		err = fmt.Errorf("reputation: reload ASN database: %w", err)
		return false, d.refuse(fileStamp{}, err)
	}
	stamp := fileStamp{fi: fi, size: fi.Size(), mod: fi.ModTime()}
	if stamp.same(cur.stamp) {
		return false, nil
	}
	if errors.Is(d.failErr, ErrInvalidDatabase) && stamp.same(d.failStamp) {
		// The same invalid file: no need to read and verify it again.
		return false, d.failErr
	}
	st, err := load(d.path)
	if err != nil {
		return false, d.refuse(stamp, err)
	}
	d.failStamp, d.failErr = fileStamp{}, nil
	// The old reader is not closed: with an in-memory database Close only
	// drops references, and a lookup may still be using it. The garbage
	// collector reclaims it once the last such lookup returns.
	d.cur.Store(st)
	return true, nil
}

// refuse records a failed reload of the file version stamp and returns
// the error to report: the earlier one when the same failure repeats, so
// that callers can tell a new failure from an old one by identity.
// d.mu must be held.
func (d *DB) refuse(stamp fileStamp, err error) error {
	if d.failErr != nil && stamp.same(d.failStamp) && d.failErr.Error() == err.Error() {
		return d.failErr
	}
	d.failStamp, d.failErr = stamp, err
	return err
}

// Watch calls Reload every interval until ctx is done, then returns.
// report, when not nil, is called after a reload that swapped in a new
// version (changed true) and after each new failure (err not nil); a
// failure that repeats for the same file is reported once. Run it in its
// own goroutine. An interval <= 0 means one minute.
func (d *DB) Watch(ctx context.Context, interval time.Duration, report func(changed bool, err error)) {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := d.Reload()
		if errors.Is(err, ErrClosed) {
			return
		}
		if report != nil && (changed || (err != nil && err != last)) {
			report(changed, err)
		}
		last = err
	}
}

// Info describes the version in service; the zero DBInfo (but for Path)
// after Close.
func (d *DB) Info() DBInfo {
	if d == nil {
		return DBInfo{}
	}
	if st := d.cur.Load(); st != nil {
		return st.info
	}
	return DBInfo{Path: d.path}
}

// Path returns the file the DB was opened from.
func (d *DB) Path() string {
	if d == nil {
		return ""
	}
	return d.path
}

// Close stops serving the database: later lookups answer ok false and
// Reload fails with ErrClosed. Lookups in flight finish normally; the
// memory is reclaimed once they have. Close is idempotent and always
// returns nil.
func (d *DB) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.cur.Store(nil)
	return nil
}
