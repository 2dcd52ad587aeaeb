// Package jsonscan is a cursor over a JSON document for hand-written fast
// paths that decode one known shape without reflection.
//
// It reads only the plain forms: strings without escapes or control bytes
// (valid UTF-8), integers without fraction or exponent, true and false.
// Every method reports false when the input leaves that path, which does
// not mean the input is invalid JSON: a caller then decodes the whole
// document again with encoding/json, so its results never differ from
// encoding/json's.
package jsonscan

import (
	"strconv"
	"unicode/utf8"
)

// Scanner is a position in a JSON document.
type Scanner struct {
	data []byte
	i    int
}

// New returns a Scanner at the start of data.
func New(data []byte) Scanner { return Scanner{data: data} }

func (s *Scanner) ws() {
	// Fast path: documents from encoding/json have no whitespace.
	if s.i < len(s.data) && s.data[s.i] > ' ' {
		return
	}
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Byte consumes c after optional whitespace.
func (s *Scanner) Byte(c byte) bool {
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.ws()
	return s.i == len(s.data)
}

// String reads a string without escapes or control bytes, valid UTF-8,
// and returns its bytes (within the document: copy what is kept).
func (s *Scanner) String() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.data) || s.data[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	ascii := true
	for j := start; j < len(s.data); j++ {
		c := s.data[j]
		if plain[c] {
			continue
		}
		switch {
		case c == '"':
			v := s.data[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		default: // c >= 0x80
			ascii = false
		}
	}
	return nil, false
}

// plain marks the bytes a string's scan passes over without a second
// look: printable ASCII other than the quote and the backslash.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Quoted reads a string as String does and returns it with its quotes.
func (s *Scanner) Quoted() ([]byte, bool) {
	s.ws()
	start := s.i
	if _, ok := s.String(); !ok {
		return nil, false
	}
	return s.data[start:s.i], true
}

// Integer reads a JSON integer (no fraction or exponent) that fits an
// int64 and returns it with its text.
func (s *Scanner) Integer() (int64, []byte, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.data) && s.data[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.data) && s.data[s.i] >= '0' && s.data[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || (s.data[digits] == '0' && s.i-digits > 1) {
		return 0, nil, false // no digits, or a leading zero (invalid JSON)
	}
	if s.i < len(s.data) {
		switch s.data[s.i] {
		case '.', 'e', 'E':
			return 0, nil, false
		}
	}
	text := s.data[start:s.i]
	n, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return 0, nil, false // out of int64's range
	}
	return n, text, true
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	s.ws()
	rest := s.data[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// Object reads an object, calling member for each member with its key
// (within the document); member must read the value.
func (s *Scanner) Object(member func(key []byte) bool) bool {
	if !s.Byte('{') {
		return false
	}
	if s.Byte('}') {
		return true
	}
	for {
		k, ok := s.String()
		if !ok || !s.Byte(':') || !member(k) {
			return false
		}
		if s.Byte(',') {
			continue
		}
		return s.Byte('}')
	}
}
