package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
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

// problemLine returns the line of the token a parser error is about, given
// the line of the block around it (from), for data whose decoding fails
// with the error text want. The library reports only the block's line
// (its context mark) and keeps the token's (its problem mark) to itself,
// so this finds the shortest run of data's first lines, from from on,
// that fails as data does however it ends: cut off there, or followed
// by a line closing a flow mapping, or one closing a flow sequence. Up to the token's line,
// such a run either parses or fails at its end, differently; from it on,
// the parser stops at the token, before the end. It returns from when no
// run does (the token is data's end).
func problemLine(data []byte, from int, want string) int {
	var ends []int // the end of each line, past its newline
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(k int) bool { // whether the first k lines fail as data does
		head := data[:ends[k-1]]
		if decodeError(head) != want {
			return false
		}
		for _, end := range []string{"\n}\n", "\n]\n"} {
			if decodeError(append(append([]byte(nil), head...), end...)) != want {
				return false
			}
		}
		return true
	}
	n := len(ends)
	if from < 1 || from > n {
		return from
	}
	// The token is mostly near its block's start: gallop from there, then
	// halve the last step.
	lo, hi := from, from
	for step := 1; !fails(hi); step *= 2 {
		if hi == n {
			return from
		}
		lo, hi = hi+1, min(from+step, n)
	}
	return lo + sort.Search(hi-lo, func(i int) bool { return fails(lo + i) })
}

// decodeError returns the text of the error parse's decoding of data
// into at most one document meets, or "" for none.
func decodeError(data []byte) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint("panic: ", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for range 2 {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return ""
			}
			return err.Error()
		}
	}
	return ""
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
				line = problemLine(data, line+1, err.Error())
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
