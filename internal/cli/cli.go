// Package cli is the command-line layer of both daemons (CONTRACT 6.8):
// every flag is declared once, in a table, with its environment variable
// and help text; an environment value is checked like the flag; --help
// lists the commands, the flags with their variables and examples;
// --version prints the module version and VCS revision. Errors in the
// command line are *UsageError, which the mains turn into exit code 2
// (ExitUsage); failures at run time exit 1 (ExitFailure).
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Exit codes of both daemons.
const (
	ExitOK      = 0 // done; also --help and --version
	ExitFailure = 1 // a failure at run time (a port in use, a policy refused at start)
	ExitUsage   = 2 // a usage error: a bad flag, flag value, env value or argument
)

// ErrHelp is returned by Parse for -h, -help or --help: print the help and
// exit 0. ErrVersion is returned for --version.
var (
	ErrHelp    = errors.New("cli: help requested")
	ErrVersion = errors.New("cli: version requested")
)

// UsageError is a mistake in the command line or the environment; the
// daemons exit 2 on it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a *UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Flag is one flag of a command: --Name, also set by the environment
// variable Env ("" for none) when the flag is not given.
type Flag struct {
	Name  string
	Env   string
	Arg   string // the value's placeholder in --help ("ADDR", "URL"); "" for a boolean
	Usage string
	// Secret keeps the value out of error messages.
	Secret bool
	Value  flag.Value
}

// String declares a string flag that sets *p (initially def).
func String(p *string, name, env, def, arg, usage string) Flag {
	*p = def
	return Flag{Name: name, Env: env, Arg: arg, Usage: usage, Value: (*stringValue)(p)}
}

// Secret is String for a value kept out of error messages and --help
// defaults (tokens, passwords).
func Secret(p *string, name, env, arg, usage string) Flag {
	f := String(p, name, env, "", arg, usage)
	f.Secret = true
	return f
}

// Int declares an int flag that sets *p (initially def).
func Int(p *int, name, env string, def int, usage string) Flag {
	*p = def
	return Flag{Name: name, Env: env, Arg: "N", Usage: usage, Value: (*intValue)(p)}
}

// Int64 declares an int64 flag that sets *p (initially def).
func Int64(p *int64, name, env string, def int64, usage string) Flag {
	*p = def
	return Flag{Name: name, Env: env, Arg: "N", Usage: usage, Value: (*int64Value)(p)}
}

// Duration declares a duration flag ("50ms", "2s") that sets *p.
func Duration(p *time.Duration, name, env string, def time.Duration, usage string) Flag {
	*p = def
	return Flag{Name: name, Env: env, Arg: "DURATION", Usage: usage, Value: (*durationValue)(p)}
}

// Positive returns f, a number or duration flag, refusing a value that is
// not more than 0: a count, a size or a deadline to which 0 gives no
// meaning (the daemons' configurations read a zero field as its default,
// so a 0 given on purpose would be the default in silence).
func (f Flag) Positive() Flag {
	f.Value = positiveValue{f.Value}
	return f
}

// positiveValue is a number or duration flag's value that must be more
// than 0 (Flag.Positive).
type positiveValue struct{ flag.Value }

func (p positiveValue) Set(v string) error {
	if err := p.Value.Set(v); err != nil {
		return err
	}
	var n int64
	switch x := p.Value.(type) {
	case *intValue:
		n = int64(*x)
	case *int64Value:
		n = int64(*x)
	case *durationValue:
		n = int64(*x)
	}
	if n <= 0 {
		return errors.New("want more than 0")
	}
	return nil
}

// Bool declares a boolean flag (--name or --name=false; the variable takes
// true, false, 1 or 0) that sets *p.
func Bool(p *bool, name, env string, def bool, usage string) Flag {
	*p = def
	return Flag{Name: name, Env: env, Usage: usage, Value: (*boolValue)(p)}
}

// Parse parses args against flags, then, for every flag not given, its
// environment variable through lookup (os.LookupEnv when nil); an empty
// variable counts as unset. It returns the arguments after the flags.
// --help and --version return ErrHelp and ErrVersion; every other mistake
// a *UsageError naming the flag or variable.
func Parse(cmd string, flags []Flag, args []string, lookup func(string) (string, bool)) ([]string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var version bool
	fs.BoolVar(&version, "version", false, "")
	for _, f := range flags {
		fs.Var(f.Value, f.Name, f.Usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, ErrHelp
		}
		return nil, Usagef("%s: %v (see %s --help)", cmd, err, strings.Fields(cmd)[0])
	}
	if version {
		return nil, ErrVersion
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, f := range flags {
		if f.Env == "" || given[f.Name] {
			continue
		}
		v, ok := lookup(f.Env)
		if !ok || v == "" {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			shown := strconv.Quote(v)
			if f.Secret {
				shown = "(hidden)"
			}
			return nil, Usagef("%s: environment variable %s=%s (for --%s): %v", cmd, f.Env, shown, f.Name, err)
		}
	}
	return fs.Args(), nil
}

// Command is a subcommand for --help.
type Command struct {
	Name    string // "validate"; "" for the command itself
	Args    string // "--config FILE"
	Summary string
	Example string
}

// Help describes a program for WriteHelp.
type Help struct {
	Name     string // "limiter"
	Summary  string
	Commands []Command
	Flags    []Flag
	Notes    string // printed last
}

// WriteHelp writes the help: usage, commands with an example each, and
// every flag with its variable and default.
func WriteHelp(w io.Writer, h Help) {
	fmt.Fprintf(w, "%s: %s\n\nUsage:\n", h.Name, h.Summary)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range h.Commands {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.Join(strings.Fields(h.Name+" "+c.Name+" "+c.Args), " "), c.Summary)
	}
	fmt.Fprintf(tw, "  %s --help\tthis help\n", h.Name)
	fmt.Fprintf(tw, "  %s --version\tprint the version (module version and VCS revision)\n", h.Name)
	_ = tw.Flush()
	fmt.Fprintf(w, "\nExamples:\n")
	for _, c := range h.Commands {
		if c.Example != "" {
			fmt.Fprintf(w, "  %s\n", c.Example)
		}
	}
	fmt.Fprintf(w, "\nFlags (each also read from the environment variable beside it; a flag given on the\ncommand line wins, an empty variable counts as unset, a bad value exits 2):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range h.Flags {
		name := "--" + f.Name
		if f.Arg != "" {
			name += " " + f.Arg
		}
		env := f.Env
		if env == "" {
			env = "-"
		}
		usage := f.Usage
		if def := f.Value.String(); def != "" && def != "0" && def != "false" && !f.Secret && !strings.Contains(usage, "default") {
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, env, usage)
	}
	_ = tw.Flush()
	if h.Notes != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(h.Notes))
	}
}

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }

type intValue int

func (i *intValue) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, strconv.IntSize)
	if err != nil {
		return errors.New("want a whole number")
	}
	*i = intValue(n)
	return nil
}
func (i *intValue) String() string { return strconv.Itoa(int(*i)) }

type int64Value int64

func (i *int64Value) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return errors.New("want a whole number")
	}
	*i = int64Value(n)
	return nil
}
func (i *int64Value) String() string { return strconv.FormatInt(int64(*i), 10) }

type durationValue time.Duration

func (d *durationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want a duration such as 50ms, 2s or 1m")
	}
	*d = durationValue(x)
	return nil
}
func (d *durationValue) String() string { return time.Duration(*d).String() }

type boolValue bool

func (b *boolValue) Set(v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("want true or false")
	}
	*b = boolValue(x)
	return nil
}
func (b *boolValue) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolValue) IsBoolFlag() bool { return true }
