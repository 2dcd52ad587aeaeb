package service

import (
	"strings"
	"testing"
)

// TestRedisURLForms parses every --redis form of CONTRACT 6.8: user,
// password and TLS on each, Sentinel, and errors that never show the
// password.
func TestRedisURLForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in                 string
		addrs              string
		user, pass         string
		tls, cluster       bool
		master             string
		db                 int
		sentUser, sentPass string
		wantErr            string
	}{
		{in: "redis://alice:p%40ss@127.0.0.1:6379/2", addrs: "127.0.0.1:6379", user: "alice", pass: "p@ss", db: 2},
		{in: "redis://:pw@127.0.0.1:6379", addrs: "127.0.0.1:6379", pass: "pw"},
		{in: "rediss://u:pw@cache.example.com:6380/0", addrs: "cache.example.com:6380", user: "u", pass: "pw", tls: true},
		{in: "redis+cluster://h1:1,h2:2", addrs: "h1:1,h2:2", cluster: true},
		{in: "redis+cluster://:pw@h1:1,h2:2", addrs: "h1:1,h2:2", pass: "pw", cluster: true},
		{in: "redis+cluster://user:p%3Aw%2Cx@h1:1,h2:2,h3:3/", addrs: "h1:1,h2:2,h3:3", user: "user", pass: "p:w,x", cluster: true},
		{in: "rediss+cluster://user:pw@h1:1,h2:2", addrs: "h1:1,h2:2", user: "user", pass: "pw", cluster: true, tls: true},
		{in: "redis+sentinel://s1:26379,s2:26379/mymaster/3", addrs: "s1:26379,s2:26379", master: "mymaster", db: 3},
		{in: "redis+sentinel://:pw@s1:26379/mymaster", addrs: "s1:26379", pass: "pw", master: "mymaster"},
		{in: "rediss+sentinel://u:pw@s1:26379,s2:26379/m/1?sentinel_user=su&sentinel_password=sp", addrs: "s1:26379,s2:26379",
			user: "u", pass: "pw", master: "m", db: 1, tls: true, sentUser: "su", sentPass: "sp"},
		{in: "h1:1,h2:2", addrs: "h1:1,h2:2", cluster: true},
		{in: "127.0.0.1:6379", addrs: "127.0.0.1:6379"},

		{in: "redis+cluster://:s3cret@h1:1,h2", wantErr: `service: redis url redis+cluster://***@h1:1,h2: service: redis address "h2": address h2: missing port in address`},
		{in: "redis+cluster://:s3cret@h1:1/2", wantErr: "Redis Cluster has only database 0"},
		{in: "redis+cluster://:s3cret@h1:x", wantErr: `port "x" is not a TCP port`},
		{in: "redis+sentinel://:s3cret@s1:26379", wantErr: "no master name"},
		{in: "redis+sentinel://:s3cret@s1:26379/m/x", wantErr: `database "x" is not a number`},
		{in: "redis+sentinel://s1:26379/m?sentinel_password=s3cret&x=1", wantErr: `unknown query parameter "x"`},
		{in: "rediss://:s3cret@h:1/x", wantErr: "service: redis url rediss://***@h:1/x: redis: invalid database number"},
		{in: "memcached://:s3cret@h:1", wantErr: `scheme "memcached"`},
	} {
		o, err := RedisOptions(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("%s: err %v, want %q (and no password)", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := strings.Join(o.Addrs, ","); got != c.addrs || o.Username != c.user || o.Password != c.pass || (o.TLSConfig != nil) != c.tls ||
			o.IsClusterMode != c.cluster || o.MasterName != c.master || o.DB != c.db || o.SentinelUsername != c.sentUser || o.SentinelPassword != c.sentPass {
			t.Errorf("%s: got addrs %s user %q pass %q tls %v cluster %v master %q db %d sentinel %q/%q", c.in, got, o.Username, o.Password,
				o.TLSConfig != nil, o.IsClusterMode, o.MasterName, o.DB, o.SentinelUsername, o.SentinelPassword)
		}
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0":                              "redis://***@h:1/0",
		"redis+cluster://:pw@h1:1,h2:2":                   "redis+cluster://***@h1:1,h2:2",
		"redis+sentinel://s:1/m?sentinel_password=pw&x=1": "redis+sentinel://s:1/m?sentinel_password=***&x=1",
		"redis://h:1/0":                                   "redis://h:1/0",
		"h1:1,h2:2":                                       "h1:1,h2:2",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRedisOptions: any --redis value parses or fails without panicking;
// a success names at least one address, and redaction is stable.
func FuzzRedisOptions(f *testing.F) {
	for _, s := range []string{
		"redis://u:p@h:1/2", "rediss://h:1", "redis+cluster://:p@h1:1,h2:2", "rediss+cluster://u:p%40@h:1/",
		"redis+sentinel://:p@s1:1,s2:2/m/3?sentinel_password=x", "rediss+sentinel://s:1/m", "h1:1,h2:2", "h:1",
		"redis+sentinel://s:1/", "redis+cluster://@:", "redis+cluster://a@b@c:1", "://", "redis+sentinel://s:1/m/%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, u string) {
		o, err := RedisOptions(u)
		if err == nil && len(o.Addrs) == 0 {
			t.Fatalf("%q: no address and no error", u)
		}
		if r := RedactURL(u); RedactURL(r) != r {
			t.Fatalf("RedactURL not stable: %q -> %q -> %q", u, r, RedactURL(r))
		}
	})
}

// TestRedisURLQueryIsNeverIgnored: a query parameter of a redis:// or
// rediss:// URL is either honoured (db, skip_verify) or refused, as the
// Cluster and Sentinel forms refuse theirs. Before, go-redis parsed
// dial_timeout, pool_size, client_name, protocol and the rest, and only
// the address, database, credentials and TLS were kept: the limiter
// started without them, saying nothing.
func TestRedisURLQueryIsNeverIgnored(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, wantErr string
	}{
		{"redis://:s3cret@127.0.0.1:6379/0?dial_timeout=1s", `unknown query parameter "dial_timeout"`},
		{"rediss://127.0.0.1:6380/0?skip_verify=true&pool_size=100", `unknown query parameter "pool_size"`},
		{"redis://127.0.0.1:6379?client_name=limiter-a", `unknown query parameter "client_name"`},
		{"redis://127.0.0.1:6379/0?protocol=2", `unknown query parameter "protocol"`},
	} {
		if _, err := RedisOptions(c.in); err == nil || !strings.Contains(err.Error(), c.wantErr) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: err %v, want %q (and no password)", c.in, err, c.wantErr)
		}
	}
	o, err := RedisOptions("redis://127.0.0.1:6379?db=3")
	if err != nil || o.DB != 3 {
		t.Errorf("?db=3: %v, db %v", err, o)
	}
	o, err = RedisOptions("rediss://127.0.0.1:6380/0?skip_verify=true")
	if err != nil || o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify {
		t.Errorf("?skip_verify=true: %v, %+v", err, o)
	}
}
