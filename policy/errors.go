package policy

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// MaxFileSize is the largest policy file Parse and Load accept, in bytes.
const MaxFileSize = 1 << 20

// MaxApplicable is the most limits that may apply to one request: the
// most one decision checks (bucket.MaxLimits, which the engine's tests
// hold it equal to). Parse refuses a policy where more can apply to a
// request of some class and authentication state.
const MaxApplicable = 32

// maxErrors caps how many errors one Parse reports; the rest are summed up
// in a last error.
const maxErrors = 100

// ErrTooLarge is the cause of the error Parse and Load return for a file
// larger than MaxFileSize.
var ErrTooLarge = errors.New("file too large")

// ErrInvalid is the cause of every validation error: errors.Is(err,
// ErrInvalid) reports whether Parse or Load refused the file's content (as
// opposed to failing to read it).
var ErrInvalid = errors.New("invalid policy")

// Error is one problem found in a policy file. Parse and Load return every
// Error they find, joined with errors.Join and sorted by line; use errors.As
// to get the first, or the Unwrap() []error method of the joined error to get
// them all.
type Error struct {
	// File is the file name as given to Parse or Load.
	File string
	// Line is the 1-based line of the offending value (of the enclosing
	// mapping for a missing field).
	Line int
	// Msg says what is wrong, without file and line.
	Msg string
	// Err is the underlying cause, if any (ErrTooLarge, a YAML syntax error,
	// a file-system error); nil otherwise.
	Err error
}

// Error returns "FILE:LINE: MSG".
func (e *Error) Error() string {
	return e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Msg
}

// Unwrap returns the cause (Err) and ErrInvalid.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrInvalid, e.Err}
	}
	return []error{ErrInvalid}
}

// oneError returns e as Parse returns its errors.
func oneError(e *Error) error {
	return joinErrors([]*Error{e}, 0)
}

// joinErrors sorts errs by line (stably, so errors on one line keep the order
// they were found in), caps their number and joins them. dropped counts
// errors found but not kept.
func joinErrors(errs []*Error, dropped int) error {
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	if len(errs) > maxErrors {
		more := len(errs) - maxErrors + dropped
		last := errs[maxErrors]
		errs = append(errs[:maxErrors:maxErrors], &Error{
			File: last.File, Line: last.Line,
			Msg: fmt.Sprintf("too many errors (%d more not shown)", more),
		})
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// yamlLineRE finds the line number go.yaml.in/yaml/v3 puts in its syntax errors.
var yamlLineRE = regexp.MustCompile(`^line (\d+): `)

// yamlParserErrors are the messages of the YAML parser (as opposed to its
// scanner): for these the library reports a 0-based line.
var yamlParserErrors = []string{
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found undefined tag handle",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// syntaxError turns an error of the YAML library into an *Error with the best
// line it can find.
func syntaxError(file string, data []byte, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
		for _, p := range yamlParserErrors {
			if strings.HasPrefix(msg, p) {
				line++
				break
			}
		}
	} else if strings.HasPrefix(msg, "unknown anchor '") {
		// The library gives no line; find the alias in the text.
		name := strings.TrimPrefix(msg, "unknown anchor '")
		if i := strings.IndexByte(name, '\''); i >= 0 {
			name = name[:i]
		}
		if i := strings.Index(string(data), "*"+name); i >= 0 {
			line = 1 + strings.Count(string(data[:i]), "\n")
		}
	}
	if line < 1 {
		line = 1
	}
	// Keep every message on one line so that each error stays "FILE:LINE: ...".
	msg = strings.ReplaceAll(msg, "\n", " ")
	return &Error{File: file, Line: line, Msg: "invalid YAML: " + msg, Err: err}
}
