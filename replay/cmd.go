package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/internal/cli"
	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// BuiltinName names the built-in example policy in reports.
const BuiltinName = "built-in example policy"

// Args are the parsed arguments of `limiter replay`, one field per flag
// (see ParseArgs and docs/tuning.md).
type Args struct {
	NATSURL       string
	NATSAuth      streams.Auth
	Candidate     string
	Baseline      string
	Range         Range
	JSON          bool
	Streams       streams.Config
	Limits        Limits
	ReorderWindow time.Duration
	Quiet         bool
}

// flags is every flag of `limiter replay`, bound to a (and fromSeq, which
// a.Range.FromSeq takes after a check).
func flags(a *Args, fromSeq *int64) []cli.Flag {
	return slices.Concat([]cli.Flag{
		cli.String(&a.NATSURL, "nats", "TOLLGATE_NATS", "", "URL", "NATS server URL(s) holding the record (required); nats://user:pass@host:port, tls:// or nats+tls:// for TLS"),
	}, streams.AuthFlags(&a.NATSAuth.CA, &a.NATSAuth.Creds), []cli.Flag{
		cli.String(&a.Candidate, "config", "TOLLGATE_CONFIG", "", "FILE", "the candidate policy file (required)"),
		cli.String(&a.Baseline, "baseline", "", "", "FILE", "the policy to compare with (default: the built-in example policy)"),
		cli.Duration(&a.Range.Since, "since", "", 0, "replay the last DURATION of the record, e.g. 24h (default: all of it)"),
		cli.Int64(fromSeq, "from-seq", "", 0, "replay the decisions stream from sequence N on, and the reports since that decision"),
		cli.Bool(&a.JSON, "json", "", false, "print the report as one JSON object instead of Markdown"),
		cli.String(&a.Streams.Prefix, "subject-prefix", "TOLLGATE_SUBJECT_PREFIX", streams.DefaultPrefix, "PREFIX", "prefix of every NATS subject, as the limiters'"),
		cli.String(&a.Streams.Name, "stream-name", "TOLLGATE_STREAM_NAME", streams.DefaultName, "NAME", "prefix of the JetStream stream names, as the limiters'"),
		cli.Int(&a.Limits.MaxKeys, "max-keys", "", DefaultMaxKeys, "bound on buckets held by each policy's memory store"),
		cli.Int(&a.Limits.MaxIdentities, "max-identities", "", DefaultMaxIdentities, "bound on identities tallied (more are counted as untracked)"),
		cli.Int(&a.Limits.MaxAdminChanges, "max-admin-changes", "", DefaultMaxAdminChanges, "bound on the admin changes of the audit stream applied (the newest are kept)"),
		cli.Duration(&a.ReorderWindow, "reorder-window", "", DefaultReorderWindow, "how far out of event-time order events may arrive and still replay in order"),
		cli.Bool(&a.Quiet, "quiet", "", false, "no progress lines on stderr"),
	})
}

// help writes `limiter replay --help`.
func help(w io.Writer) {
	var a Args
	var n int64
	cli.WriteHelp(w, cli.Help{
		Name:    "limiter replay",
		Summary: "re-run recorded traffic under a candidate policy and a baseline, and report what changed and for whom.",
		Commands: []cli.Command{{Args: "--nats URL --config CANDIDATE.yaml [--baseline CURRENT.yaml] [--since 1h | --from-seq N] [--json]",
			Summary: "read the decisions and reports from JetStream (riskd's consumers untouched) and print the report",
			Example: "limiter replay --nats nats://127.0.0.1:4222 --config stricter.yaml --baseline policy.yaml --since 24h"}},
		Flags: flags(&a, &n),
		Notes: "Exit codes: 0 done, 1 a failure at run time, 2 a usage error. Docs: docs/tuning.md.",
	})
}

// ParseArgs parses the arguments of `limiter replay` (after the word
// replay) and the environment, read through lookupEnv (os.LookupEnv; an
// empty variable counts as unset). It returns cli.ErrHelp or
// cli.ErrVersion when asked for those, and a *cli.UsageError for every
// mistake.
func ParseArgs(args []string, lookupEnv func(string) (string, bool)) (Args, error) {
	var a Args
	var fromSeq int64
	rest, err := cli.Parse("limiter replay", flags(&a, &fromSeq), args, lookupEnv)
	if err != nil {
		return a, err
	}
	var problem string
	switch {
	case len(rest) > 0:
		problem = fmt.Sprintf("unexpected argument %q", rest[0])
	case a.NATSURL == "":
		problem = "--nats URL is required: the record is read from JetStream"
	case a.Candidate == "":
		problem = "--config CANDIDATE.yaml is required"
	case a.Range.Since < 0 || fromSeq < 0:
		problem = "--since and --from-seq must be positive"
	case a.Range.Since > 0 && fromSeq > 0:
		problem = "--since and --from-seq exclude each other"
	case a.Limits.MaxKeys < 1 || a.Limits.MaxIdentities < 1:
		problem = "--max-keys and --max-identities must be at least 1"
	case a.ReorderWindow <= 0:
		problem = "--reorder-window must be positive"
	}
	if problem == "" {
		if err := streams.ValidateURLs(a.NATSURL); err != nil {
			problem = err.Error()
		} else if err := a.NATSAuth.Validate(); err != nil {
			problem = err.Error()
		}
	}
	if problem != "" {
		return a, cli.Usagef("limiter replay: %s (see limiter replay --help)", problem)
	}
	a.Range.FromSeq = uint64(fromSeq)
	return a, nil
}

// Command runs `limiter replay` with args (after the word replay) and
// returns the exit code: 0 done, 1 failed at run time, 2 usage error.
func Command(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	a, err := ParseArgs(args, lookupEnv)
	switch {
	case errors.Is(err, cli.ErrHelp):
		help(stdout)
		return cli.ExitOK
	case errors.Is(err, cli.ErrVersion):
		fmt.Fprintln(stdout, cli.Version("limiter"))
		return cli.ExitOK
	case err != nil:
		fmt.Fprintln(stderr, err)
		return cli.ExitUsage
	}
	if _, set := lookupEnv("GOGC"); !set {
		// The replay's live heap is its bounded state, so a higher GC
		// target costs little memory and spares collections.
		debug.SetGCPercent(400)
	}
	if err := a.run(ctx, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "limiter replay:", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// run loads the policies, replays and prints the report.
func (a Args) run(ctx context.Context, stdout, stderr io.Writer) error {
	candidate, err := policy.Load(a.Candidate)
	if err != nil {
		return err
	}
	baseline, baseName := policy.Default(), BuiltinName
	if a.Baseline != "" {
		if baseline, err = policy.Load(a.Baseline); err != nil {
			return err
		}
		baseName = a.Baseline
	}
	opts := append([]nats.Option{nats.Name("tollgate-replay"), nats.Timeout(5 * time.Second)}, a.NATSAuth.Options()...)
	nc, err := nats.Connect(streams.ServerURLs(a.NATSURL), opts...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", streams.RedactURL(a.NATSURL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	o := Options{
		Policies:  Policies{Candidate: candidate, Baseline: baseline, CandidateName: a.Candidate, BaselineName: baseName},
		Limits:    a.Limits,
		JetStream: js, Streams: a.Streams, Range: a.Range, ReorderWindow: a.ReorderWindow,
	}
	if !a.Quiet {
		o.Progress = stderr
	}
	rep, err := Run(ctx, o)
	if err != nil {
		return err
	}
	if a.JSON {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteMarkdown(stdout)
}
