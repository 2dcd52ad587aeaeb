package service

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisOptions parses a --redis value (CONTRACT 6.8). Every form may carry
// a user and password and may use TLS:
//
//	redis://[user:pass@]host:port[/db]          one server (rediss:// for TLS)
//	redis+cluster://[user:pass@]h1:p1,h2:p2     Redis Cluster (rediss+cluster://; a bare
//	                                            "h1:p1,h2:p2" list too, without TLS or auth)
//	redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER[/db]
//	                                            the master the Sentinels at h1, h2 name
//	                                            (rediss+sentinel://)
//	host:port                                   one server
//
// user and pass are percent-decoded. For Cluster they authenticate on
// every node, for Sentinel on the master and replicas; Sentinels that
// want their own credentials take the query parameters sentinel_user and
// sentinel_password. TLS verifies the server's certificate against the
// system roots (see WithRedisCA for a private CA). Errors never show the
// password.
func RedisOptions(u string) (*redis.UniversalOptions, error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		if strings.Contains(u, ",") {
			addrs, err := redisAddrs(u)
			if err != nil {
				return nil, err
			}
			return &redis.UniversalOptions{Addrs: addrs, IsClusterMode: true}, nil
		}
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("service: redis %q is neither redis://host:port/db nor host:port", RedactURL(u))
		}
		return &redis.UniversalOptions{Addrs: []string{u}}, nil
	}
	switch scheme {
	case "redis", "rediss":
		if err := singleQuery(u); err != nil {
			return nil, fmt.Errorf("service: redis url %s: %w", RedactURL(u), err)
		}
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("service: redis url %s: %w", RedactURL(u), err)
		}
		return &redis.UniversalOptions{Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig}, nil
	case "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel":
	default:
		return nil, fmt.Errorf("service: redis url %s: scheme %q: want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", RedactURL(u), scheme)
	}
	o, err := multiHostURL(scheme, rest)
	if err != nil {
		return nil, fmt.Errorf("service: redis url %s: %w", RedactURL(u), err)
	}
	return o, nil
}

// singleQuery refuses the query parameters of a redis:// or rediss:// URL
// that the store would not honour: go-redis's ParseURL reads many (pool
// and timeout settings, client_name, protocol), but only the address,
// database (the path or db), credentials and TLS (with skip_verify) are
// kept, so the others would be dropped in silence.
func singleQuery(u string) error {
	_, query, ok := strings.Cut(u, "?")
	if !ok {
		return nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	keys := slices.Sorted(maps.Keys(q))
	for _, k := range keys {
		if k != "db" && k != "skip_verify" {
			return fmt.Errorf("unknown query parameter %q (want db or skip_verify)", k)
		}
	}
	return nil
}

// multiHostURL parses what follows "SCHEME://" in a Cluster or Sentinel
// URL: [user:pass@]h1:p1,h2:p2[/path][?query].
func multiHostURL(scheme, rest string) (*redis.UniversalOptions, error) {
	o := &redis.UniversalOptions{}
	if strings.HasPrefix(scheme, "rediss") {
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12} // ServerName: each node's host, set by the dialer
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(hosts, '@'); at >= 0 {
		user, pass, err := userinfo(hosts[:at])
		if err != nil {
			return nil, err
		}
		o.Username, o.Password, hosts = user, pass, hosts[at+1:]
	}
	addrs, err := redisAddrs(hosts)
	if err != nil {
		return nil, err
	}
	o.Addrs = addrs
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if strings.HasSuffix(scheme, "+cluster") {
		o.IsClusterMode = true
		if strings.Trim(path, "/") != "" && strings.Trim(path, "/") != "0" {
			return nil, fmt.Errorf("database %q: Redis Cluster has only database 0", path)
		}
		if len(q) > 0 {
			return nil, fmt.Errorf("unknown query parameters %q", query)
		}
		return o, nil
	}
	return o, sentinelPath(o, path, q)
}

// sentinelPath reads MASTER[/db] and the Sentinels' own credentials.
func sentinelPath(o *redis.UniversalOptions, path string, q url.Values) error {
	master, db, _ := strings.Cut(path, "/")
	master, err := url.PathUnescape(master)
	if err != nil || master == "" {
		return fmt.Errorf("want redis+sentinel://[user:pass@]h1:p1,h2:p2/MASTER_NAME[/db]: no master name")
	}
	o.MasterName = master
	if db = strings.TrimSuffix(db, "/"); db != "" {
		if o.DB, err = strconv.Atoi(db); err != nil || o.DB < 0 {
			return fmt.Errorf("database %q is not a number", db)
		}
	}
	for k, v := range q {
		switch k {
		case "sentinel_user":
			o.SentinelUsername = v[0]
		case "sentinel_password":
			o.SentinelPassword = v[0]
		default:
			return fmt.Errorf("unknown query parameter %q (want sentinel_user, sentinel_password)", k)
		}
	}
	return nil
}

// userinfo splits and percent-decodes "user:pass" (or ":pass" or "user").
func userinfo(s string) (user, pass string, err error) {
	user, pass, _ = strings.Cut(s, ":")
	if user, err = url.PathUnescape(user); err == nil {
		pass, err = url.PathUnescape(pass)
	}
	if err != nil {
		return "", "", fmt.Errorf("user or password: bad percent-encoding")
	}
	return user, pass, nil
}

// redisAddrs splits a comma-separated list of host:port.
func redisAddrs(s string) ([]string, error) {
	addrs := strings.Split(s, ",")
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err == nil && host == "" {
			err = fmt.Errorf("no host")
		}
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n <= 0 || n > 65535 {
				err = fmt.Errorf("port %q is not a TCP port", port)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("service: redis address %q: %w", a, err)
		}
	}
	return addrs, nil
}

// redisOptions is RedisOptions with the CA file of --redis-ca ("" none).
func redisOptions(u, caFile string) (*redis.UniversalOptions, error) {
	o, err := RedisOptions(u)
	if err == nil && caFile != "" {
		err = WithRedisCA(o, caFile)
	}
	return o, err
}

// WithRedisCA makes o's TLS connections trust the PEM certificates in
// caFile (a private CA) instead of the system roots. It fails when caFile
// holds no certificate or o does not use TLS.
func WithRedisCA(o *redis.UniversalOptions, caFile string) error {
	if o.TLSConfig == nil {
		return fmt.Errorf("service: redis CA file %s given, but the redis URL does not use TLS (rediss://...)", caFile)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("service: redis CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("service: redis CA file %s: no PEM certificate", caFile)
	}
	o.TLSConfig = o.TLSConfig.Clone()
	o.TLSConfig.RootCAs = pool
	return nil
}

// RedactURL hides the password of a URL, and the Sentinels' password in
// its query, for logs and errors.
func RedactURL(u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		return u
	}
	head, query, hasQuery := strings.Cut(u, "?")
	if at := strings.LastIndexByte(head, '@'); at > i {
		head = head[:i+3] + "***@" + head[at+1:]
	}
	if !hasQuery {
		return head
	}
	parts := strings.Split(query, "&")
	for j, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			parts[j] = k + "=***"
		}
	}
	return head + "?" + strings.Join(parts, "&")
}
