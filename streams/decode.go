package streams

import (
	"encoding/json"

	"github.com/tollgate-dev/tollgate/internal/jsonscan"
)

// DecodeDecisionBatch decodes a decisions message into b, with exactly the
// result of json.Unmarshal into a zero DecisionBatch (b is reset first;
// its Decisions array is reused).
//
// riskd decodes every decision of every limiter, and encoding/json's
// reflection was most of its CPU. This decoder reads the shape the
// publisher writes (the schema's field names, strings without escapes)
// directly; on anything else (an escape, an unknown or differently cased
// field, a null, a number that is not a plain integer, trailing data, bad
// UTF-8) it starts over with json.Unmarshal, so it never disagrees with it
// (FuzzDecodeDecisionBatch checks).
func DecodeDecisionBatch(data []byte, b *DecisionBatch) error {
	reuse := b.Decisions[:0]
	*b = DecisionBatch{}
	d := decoder{s: jsonscan.New(data)}
	if d.batch(b, reuse) && d.s.End() {
		return nil
	}
	*b = DecisionBatch{}
	return json.Unmarshal(data, b)
}

// decoder reads one decisions message.
type decoder struct {
	s jsonscan.Scanner
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

// batch reads a DecisionBatch, its decisions into reuse's array.
func (d *decoder) batch(b *DecisionBatch, reuse []Decision) bool {
	seen := false
	return d.s.Object(func(key []byte) bool {
		switch string(key) {
		case "v":
			n, _, ok := d.s.Integer()
			if !ok || int64(int(n)) != n {
				return false
			}
			b.V = int(n)
			return true
		case "decisions":
			// a second "decisions" merges into the first with encoding/json
			if seen || !d.s.Byte('[') {
				return false
			}
			seen = true
			b.Decisions = reuse
			if d.s.Byte(']') {
				if b.Decisions == nil {
					b.Decisions = []Decision{}
				}
				return true
			}
			for {
				b.Decisions = append(b.Decisions, Decision{Cost: 1})
				x := &b.Decisions[len(b.Decisions)-1]
				if !d.s.Object(func(key []byte) bool { return d.field(x, key) }) {
					return false
				}
				if d.s.Byte(',') {
					continue
				}
				return d.s.Byte(']')
			}
		}
		return false
	})
}

// field reads the value of x's member key.
func (d *decoder) field(x *Decision, key []byte) bool {
	var dst *string
	var f int
	switch string(key) {
	case "ts":
		q, ok := d.s.Quoted()
		return ok && x.TS.UnmarshalJSON(q) == nil
	case "allowed":
		v, ok := d.s.Bool()
		x.Allowed = v
		return ok
	case "device_verified":
		v, ok := d.s.Bool()
		x.DeviceVerified = v
		return ok
	case "remaining":
		n, _, ok := d.s.Integer()
		x.Remaining = n
		return ok
	case "cost":
		n, text, ok := d.s.Integer()
		if !ok || n == 0 && text[0] == '-' {
			return false // a fraction, an exponent or -0: encoding/json's
		}
		x.Cost = float64(n)
		return true
	case "attributes":
		return d.attributes(x)
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
	v, ok := d.s.String()
	if !ok {
		return false
	}
	if string(v) != d.last[f] {
		d.last[f] = string(v)
	}
	*dst = d.last[f]
	return true
}

// attributes reads a decision's attributes, merging into the map already
// there as encoding/json does.
func (d *decoder) attributes(x *Decision) bool {
	if x.Attributes == nil {
		x.Attributes = make(map[string]string, 4)
	}
	return d.s.Object(func(key []byte) bool {
		v, ok := d.s.String()
		if ok {
			x.Attributes[string(key)] = string(v)
		}
		return ok
	})
}
