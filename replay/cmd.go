package replay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/streams"
)

// BuiltinName names the built-in example policy in reports.
const BuiltinName = "built-in example policy"

// Args are the parsed arguments of `limiter replay`, one field per flag
// (see ParseArgs and docs/tuning.md).
type Args struct {
	NATSURL       string
	Candidate     string
	Baseline      string
	Range         Range
	JSON          bool
	Streams       streams.Config
	Limits        Limits
	ReorderWindow time.Duration
	Quiet         bool
}

// errUsage marks a usage error (exit 2); the message is already printed.
var errUsage = errors.New("replay: usage")

// ParseArgs parses the arguments of `limiter replay` (after the word
// replay); lookupEnv reads the environment (os.LookupEnv). Errors are
// printed to stderr; the error returned is then only a marker, and
// flag.ErrHelp for --help.
func ParseArgs(args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (Args, error) {
	env := func(name, def string) string {
		if v, ok := lookupEnv(name); ok {
			return v
		}
		return def
	}
	var a Args
	fs := flag.NewFlagSet("limiter replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: limiter replay --nats URL --config CANDIDATE.yaml [--baseline CURRENT.yaml] [--since 1h | --from-seq N] [--json]")
		fs.PrintDefaults()
	}
	fs.StringVar(&a.NATSURL, "nats", env("TOLLGATE_NATS", ""), "NATS server URL(s) holding the record (env TOLLGATE_NATS; required)")
	fs.StringVar(&a.Candidate, "config", env("TOLLGATE_CONFIG", ""), "the candidate policy file (env TOLLGATE_CONFIG; required)")
	fs.StringVar(&a.Baseline, "baseline", "", "the policy to compare with (default: the built-in example policy)")
	fs.DurationVar(&a.Range.Since, "since", 0, "replay the last D of the record, e.g. 1h (default: all of it)")
	fs.Uint64Var(&a.Range.FromSeq, "from-seq", 0, "replay the decisions stream from sequence N on (and the reports since that decision)")
	fs.BoolVar(&a.JSON, "json", false, "print the report as one JSON object instead of Markdown")
	fs.StringVar(&a.Streams.Prefix, "subject-prefix", env("TOLLGATE_SUBJECT_PREFIX", streams.DefaultPrefix), "prefix of every NATS subject (env TOLLGATE_SUBJECT_PREFIX)")
	fs.StringVar(&a.Streams.Name, "stream-name", env("TOLLGATE_STREAM_NAME", "TOLLGATE"), "prefix of the JetStream stream names (env TOLLGATE_STREAM_NAME)")
	fs.IntVar(&a.Limits.MaxKeys, "max-keys", DefaultMaxKeys, "bound on buckets held by each policy's memory store")
	fs.IntVar(&a.Limits.MaxIdentities, "max-identities", DefaultMaxIdentities, "bound on identities tallied (more are counted as untracked)")
	fs.DurationVar(&a.ReorderWindow, "reorder-window", DefaultReorderWindow, "how far out of event-time order events may arrive and still replay in order")
	fs.BoolVar(&a.Quiet, "quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return a, err
		}
		return a, errUsage
	}
	var problem string
	switch {
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	case a.NATSURL == "":
		problem = "--nats URL is required: the record is read from JetStream"
	case a.Candidate == "":
		problem = "--config CANDIDATE.yaml is required"
	case a.Range.Since < 0:
		problem = "--since must be positive"
	case a.Range.Since > 0 && a.Range.FromSeq > 0:
		problem = "--since and --from-seq exclude each other"
	case a.Limits.MaxKeys < 1 || a.Limits.MaxIdentities < 1:
		problem = "--max-keys and --max-identities must be at least 1"
	case a.ReorderWindow <= 0:
		problem = "--reorder-window must be positive"
	}
	if problem != "" {
		fmt.Fprintln(stderr, "limiter replay:", problem)
		return a, errUsage
	}
	return a, nil
}

// Command runs `limiter replay` with args (after the word replay) and
// returns the exit code: 0 done, 1 failed at run time, 2 usage error.
func Command(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	a, err := ParseArgs(args, lookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if _, set := lookupEnv("GOGC"); !set {
		// The replay's live heap is its bounded state; collecting less
		// often saves a tenth of its CPU time.
		debug.SetGCPercent(400)
	}
	if err := a.run(ctx, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "limiter replay:", err)
		return 1
	}
	return 0
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
	nc, err := nats.Connect(a.NATSURL, nats.Name("tollgate-replay"), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect %s: %w", a.NATSURL, err)
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
