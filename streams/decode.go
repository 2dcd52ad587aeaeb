package streams

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// DecodeDecisionBatch decodes a decisions message into b, with exactly the
// result of json.Unmarshal into a zero DecisionBatch (b is reset first).
//
// riskd decodes every decision of every limiter, and encoding/json's
// reflection was most of its CPU. This decoder reads the shape the
// publisher writes (the schema's field names, plain ASCII or UTF-8
// strings without escapes) directly; on anything else (an escape, an
// unknown or differently cased field, a null, a number that is not a plain
// integer, trailing data, bad UTF-8) it starts over with json.Unmarshal,
// so it never disagrees with it (FuzzDecodeDecisionBatch checks).
func DecodeDecisionBatch(data []byte, b *DecisionBatch) error {
	reuse := b.Decisions[:0]
	*b = DecisionBatch{}
	d := decoder{data: data}
	if d.batch(b, reuse) && d.end() {
		return nil
	}
	*b = DecisionBatch{}
	return json.Unmarshal(data, b)
}

// decoder is a cursor over one message. Its methods report false when the
// input leaves the fast path (not necessarily invalid JSON).
type decoder struct {
	data []byte
	i    int
	// last holds each string field's latest value: decisions of one batch
	// share their class and often their endpoint, route, limit and result,
	// so a value equal to the last one is reused instead of allocated.
	last [numStringFields]string
}

// String fields of a Decision, indexes into decoder.last.
const (
	fRequestID = iota
	fEndpoint
	fClass
	fRoute
	fLimit
	fResult
	fIP
	fASN
	fUserID
	fDeviceID
	fAccount
	numStringFields
)

func (d *decoder) ws() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// byte consumes c after optional whitespace.
func (d *decoder) byte(c byte) bool {
	d.ws()
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// peek reports whether the next byte after whitespace is c, without consuming it.
func (d *decoder) peek(c byte) bool {
	d.ws()
	return d.i < len(d.data) && d.data[d.i] == c
}

// end reports whether only whitespace is left.
func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.data)
}

// str reads a string without escapes or control bytes, valid UTF-8, and
// returns its raw bytes (still within data).
func (d *decoder) str() ([]byte, bool) {
	d.ws()
	if d.i >= len(d.data) || d.data[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.data); j++ {
		c := d.data[j]
		switch {
		case c == '"':
			s := d.data[start:j]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, false
}

// quoted reads a string as str does and returns it with its quotes.
func (d *decoder) quoted() ([]byte, bool) {
	d.ws()
	start := d.i
	if _, ok := d.str(); !ok {
		return nil, false
	}
	return d.data[start:d.i], true
}

// integer reads a plain JSON integer (no fraction or exponent).
func (d *decoder) integer() (int64, bool) {
	d.ws()
	start := d.i
	if d.i < len(d.data) && d.data[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.data[digits] == '0' && d.i-digits > 1) {
		return 0, false // no digits, or a leading zero (invalid JSON)
	}
	if d.i < len(d.data) {
		switch d.data[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(d.data[start:d.i]), 10, 64)
	return n, err == nil
}

// boolean reads true or false.
func (d *decoder) boolean() (bool, bool) {
	d.ws()
	rest := d.data[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		d.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		d.i += 5
		return false, true
	}
	return false, false
}

// members reads an object's members, calling field for each with its key
// (still within data); field must read the value.
func (d *decoder) members(field func(d *decoder, key []byte) bool) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.byte(':') || !field(d, k) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

// batch reads a DecisionBatch, its decisions into reuse's array.
func (d *decoder) batch(b *DecisionBatch, reuse []Decision) bool {
	seen := false
	return d.members(func(d *decoder, key []byte) bool {
		switch string(key) {
		case "v":
			n, ok := d.integer()
			if !ok || int64(int(n)) != n {
				return false
			}
			b.V = int(n)
			return true
		case "decisions":
			// a second "decisions" merges into the first with encoding/json
			if seen || !d.byte('[') {
				return false
			}
			seen = true
			b.Decisions = reuse
			if d.byte(']') {
				if b.Decisions == nil {
					b.Decisions = []Decision{}
				}
				return true
			}
			for {
				b.Decisions = append(b.Decisions, Decision{})
				if !d.decision(&b.Decisions[len(b.Decisions)-1]) {
					return false
				}
				if d.byte(',') {
					continue
				}
				return d.byte(']')
			}
		}
		return false
	})
}

// decision reads one decision's object into x.
func (d *decoder) decision(x *Decision) bool {
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return true
	}
	for {
		k, ok := d.str()
		if !ok || !d.byte(':') || !d.field(x, k) {
			return false
		}
		if d.byte(',') {
			continue
		}
		return d.byte('}')
	}
}

// field reads the value of x's member key.
func (d *decoder) field(x *Decision, key []byte) bool {
	var dst *string
	var f int
	switch string(key) {
	case "ts":
		q, ok := d.quoted()
		return ok && x.TS.UnmarshalJSON(q) == nil
	case "allowed":
		v, ok := d.boolean()
		x.Allowed = v
		return ok
	case "remaining":
		n, ok := d.integer()
		x.Remaining = n
		return ok
	case "request_id":
		dst, f = &x.RequestID, fRequestID
	case "endpoint":
		dst, f = &x.Endpoint, fEndpoint
	case "class":
		dst, f = &x.Class, fClass
	case "route":
		dst, f = &x.Route, fRoute
	case "limit":
		dst, f = &x.Limit, fLimit
	case "result":
		dst, f = &x.Result, fResult
	case "ip":
		dst, f = &x.IP, fIP
	case "asn":
		dst, f = &x.ASN, fASN
	case "user_id":
		dst, f = &x.UserID, fUserID
	case "device_id":
		dst, f = &x.DeviceID, fDeviceID
	case "account":
		dst, f = &x.Account, fAccount
	default:
		return false
	}
	s, ok := d.str()
	if !ok {
		return false
	}
	if string(s) != d.last[f] {
		d.last[f] = string(s)
	}
	*dst = d.last[f]
	return true
}
