package cli

import (
	"bytes"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParse(t *testing.T) {
	t.Parallel()
	var (
		s   string
		tok string
		n   int
		d   time.Duration
		b   bool
	)
	table := func() []Flag {
		return []Flag{
			String(&s, "listen", "T_LISTEN", "127.0.0.1:8080", "ADDR", "listen"),
			Secret(&tok, "token", "T_TOKEN", "TOKEN", "token"),
			Int(&n, "lanes", "T_LANES", 4, "lanes").Positive(),
			Duration(&d, "timeout", "T_TIMEOUT", 50*time.Millisecond, "timeout").Positive(),
			Bool(&b, "off", "T_OFF", false, "off"),
		}
	}
	for _, c := range []struct {
		name    string
		args    []string
		env     func(string) (string, bool)
		want    string // s n d b after parsing
		wantErr string
	}{
		{"defaults", nil, env(), "127.0.0.1:8080 4 50ms false", ""},
		{"env", nil, env("T_LISTEN", ":0", "T_LANES", "8", "T_TIMEOUT", "1s", "T_OFF", "true"), ":0 8 1s true", ""},
		{"empty env is unset", nil, env("T_LISTEN", "", "T_TIMEOUT", ""), "127.0.0.1:8080 4 50ms false", ""},
		{"flag beats env", []string{"--timeout", "2s", "--off"}, env("T_TIMEOUT", "abc", "T_OFF", "false"), "127.0.0.1:8080 4 2s true", ""},
		{"bad env", nil, env("T_TIMEOUT", "abc"), "", `cmd: environment variable T_TIMEOUT="abc" (for --timeout): want a duration such as 50ms, 2s or 1m`},
		{"bad int env", nil, env("T_LANES", "4x"), "", `T_LANES="4x" (for --lanes): want a whole number`},
		{"bad bool env", nil, env("T_OFF", "yes please"), "", `T_OFF="yes please" (for --off): want true or false`},
		{"bad flag value", []string{"--lanes", "many"}, env(), "", `invalid value "many" for flag -lanes: want a whole number`},
		{"unknown flag", []string{"--nope"}, env(), "", "flag provided but not defined: -nope (see cmd --help)"},
		{"zero where 0 means nothing", []string{"--lanes", "0"}, env(), "", `invalid value "0" for flag -lanes: want more than 0`},
		{"negative", []string{"--timeout", "-1s"}, env(), "", `invalid value "-1s" for flag -timeout: want more than 0`},
		{"zero env", nil, env("T_TIMEOUT", "0"), "", `T_TIMEOUT="0" (for --timeout): want more than 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("cmd", table(), c.args, c.env)
			if c.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want a UsageError with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join([]string{s, (*intValue)(&n).String(), d.String(), (*boolValue)(&b).String()}, " "); got != c.want {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
	if _, err := Parse("cmd", table(), []string{"--help"}, env()); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if _, err := Parse("cmd", table(), []string{"--version"}, env()); !errors.Is(err, ErrVersion) {
		t.Fatalf("--version: %v", err)
	}
	// A secret's value never appears in an error (strings cannot fail to
	// parse, so try through a failing value type).
	f := Secret(&tok, "token", "T_TOKEN", "TOKEN", "token")
	f.Value = (*intValue)(&n)
	if _, err := Parse("cmd", []Flag{f}, nil, env("T_TOKEN", "s3cret")); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("secret: %v", err)
	}
}

func TestWriteHelp(t *testing.T) {
	t.Parallel()
	var d time.Duration
	var tok string
	var buf bytes.Buffer
	WriteHelp(&buf, Help{Name: "prog", Summary: "does things", Commands: []Command{
		{Args: "[flags]", Summary: "run", Example: "prog --timeout 1s"},
		{Name: "check", Args: "--config FILE", Summary: "check", Example: "prog check --config x.yaml"},
	}, Flags: []Flag{
		Duration(&d, "timeout", "P_TIMEOUT", time.Second, "deadline"),
		Secret(&tok, "token", "P_TOKEN", "TOKEN", "bearer token"),
	}})
	out := buf.String()
	for _, want := range []string{
		"prog: does things", "  prog [flags]", "  prog check --config FILE", "prog --help", "prog --version",
		"  prog --timeout 1s\n", "  prog check --config x.yaml\n",
		"--timeout DURATION  P_TIMEOUT  deadline (default 1s)", "--token TOKEN       P_TOKEN    bearer token\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261201085710-05d816920786"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "05d816920786da3cc80e5e415b8c3c244ff1e844"},
			{Key: "vcs.time", Value: "2026-12-01T08:57:10Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "limiter v0.0.0-20261201085710-05d816920786 revision 05d816920786da3cc80e5e415b8c3c244ff1e844 (modified) committed 2026-12-01T08:57:10Z built with go1.26.8"
	if got := formatVersion("limiter", bi); got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := formatVersion("riskd", &debug.BuildInfo{}); got != "riskd (devel) revision unknown" {
		t.Fatalf("no vcs: %q", got)
	}
	if got := Version("x"); !strings.HasPrefix(got, "x ") || !strings.Contains(got, " revision ") {
		t.Fatalf("Version: %q", got)
	}
}
