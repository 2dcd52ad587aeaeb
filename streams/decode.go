package streams

import (
	"encoding/json"
	"hash/maphash"

	"github.com/tollgate-dev/tollgate/internal/jsonscan"
)

// DecodeDecisionBatch decodes a decisions message into b, with exactly the
// result of json.Unmarshal into a zero DecisionBatch (b is reset first;
// its Decisions array is reused).
//
// riskd decodes every decision of every limiter, so the cost of
// encoding/json's reflection is paid per decision. This decoder reads the shape the
// publisher writes (the schema's field names, strings without escapes)
// directly; on anything else (an escape, an unknown or differently cased
// field, a null, a number that is not a plain integer, trailing data, bad
// UTF-8) it starts over with json.Unmarshal, so it never disagrees with it
// (FuzzDecodeDecisionBatch checks).
func DecodeDecisionBatch(data []byte, b *DecisionBatch) error {
	var d decoder
	return d.decode(data, b)
}

// ReplayDecoder decodes decisions messages for a replay, which re-runs
// each decision and so reads only its request: as DecodeDecisionBatch,
// except that the outcome fields (request_id, class, route, limit, kind,
// result, lease_id, remaining, allowed) are left zero and the identity strings (ip,
// user_id, device_id, account, asn, endpoint) equal to one seen in an
// earlier message are often shared with it (through a bounded cache). The fields read are
// exactly DecodeDecisionBatch's. The zero value is ready to use; it is not
// safe for concurrent use.
type ReplayDecoder struct {
	d decoder
}

// internSlots is the size of a ReplayDecoder's cache of identity
// strings: a direct-mapped table (a string's hash picks its one slot; a
// new string replaces the one there), so it holds at most this many.
const internSlots = 1 << 16

// internTable is a ReplayDecoder's cache of identity strings.
type internTable struct {
	seed  maphash.Seed
	slots [internSlots]string
}

// get returns a string equal to v: the one cached in v's slot, or a new
// one, which takes the slot.
func (t *internTable) get(v []byte) string {
	i := maphash.Bytes(t.seed, v) & (internSlots - 1)
	if t.slots[i] != string(v) {
		t.slots[i] = string(v)
	}
	return t.slots[i]
}

// Decode decodes data into b (reset first; its Decisions array is reused).
func (r *ReplayDecoder) Decode(data []byte, b *DecisionBatch) error {
	r.d.skipOutcome = true
	if r.d.intern == nil {
		r.d.intern = &internTable{seed: maphash.MakeSeed()}
	}
	err := r.d.decode(data, b)
	if err == nil && r.d.fallback {
		for i := range b.Decisions {
			x := &b.Decisions[i]
			x.RequestID, x.Class, x.Route, x.Limit, x.Result, x.Remaining, x.Allowed = "", "", "", "", "", 0, false
			x.Kind, x.LeaseID = "", ""
		}
	}
	return err
}

// decode decodes data into b, falling back to encoding/json.
func (d *decoder) decode(data []byte, b *DecisionBatch) error {
	reuse := b.Decisions[:0]
	*b = DecisionBatch{}
	d.s, d.fallback, d.last = jsonscan.New(data), false, [numStringFields]string{}
	if d.batch(b, reuse) && d.s.End() {
		return nil
	}
	*b = DecisionBatch{}
	d.fallback = true
	return json.Unmarshal(data, b)
}

// decoder reads one decisions message.
type decoder struct {
	s jsonscan.Scanner
	// last holds each string field's latest value: decisions of one batch
	// share their class and often their endpoint, route, limit and result,
	// so a value equal to the last one is reused instead of allocated.
	last [numStringFields]string
	// skipOutcome leaves the outcome fields zero (ReplayDecoder).
	skipOutcome bool
	// intern, when set, shares identity strings across messages.
	intern *internTable
	// fallback: the message was decoded by encoding/json.
	fallback bool
}

// String fields of a Decision, indexes into decoder.last.
const (
	fRequestID = iota
	fEndpoint
	fClass
	fRoute
	fLimit
	fKind
	fResult
	fLeaseID
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
	switch string(key) {
	case "ts":
		q, ok := d.s.Quoted()
		return ok && x.TS.UnmarshalJSON(q) == nil
	case "allowed":
		v, ok := d.s.Bool()
		if !d.skipOutcome {
			x.Allowed = v
		}
		return ok
	case "device_verified":
		v, ok := d.s.Bool()
		x.DeviceVerified = v
		return ok
	case "attestation_budget":
		v, ok := d.s.Bool()
		x.AttestationBudget = v
		return ok
	case "remaining":
		n, _, ok := d.s.Integer()
		if !d.skipOutcome {
			x.Remaining = n
		}
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
		return d.stringValue(&x.RequestID, fRequestID)
	case "endpoint":
		return d.stringValue(&x.Endpoint, fEndpoint)
	case "class":
		return d.stringValue(&x.Class, fClass)
	case "route":
		return d.stringValue(&x.Route, fRoute)
	case "limit":
		return d.stringValue(&x.Limit, fLimit)
	case "kind":
		return d.stringValue(&x.Kind, fKind)
	case "result":
		return d.stringValue(&x.Result, fResult)
	case "lease_id":
		return d.stringValue(&x.LeaseID, fLeaseID)
	case "ip":
		return d.stringValue(&x.IP, fIP)
	case "asn":
		return d.stringValue(&x.ASN, fASN)
	case "user_id":
		return d.stringValue(&x.UserID, fUserID)
	case "device_id":
		return d.stringValue(&x.DeviceID, fDeviceID)
	case "account":
		return d.stringValue(&x.Account, fAccount)
	}
	return false
}

// stringValue reads a string into *dst, field f: the string of the
// previous decision when equal (no allocation), else a new one or, for an
// identity field of a replay, the interned one. A replay skips the
// outcome fields.
func (d *decoder) stringValue(dst *string, f int) bool {
	v, ok := d.s.String()
	if !ok {
		return false
	}
	outcome := f != fEndpoint && f <= fLeaseID // request_id, class, route, limit, kind, result, lease_id
	if d.skipOutcome && outcome {
		return true
	}
	if string(v) != d.last[f] {
		if d.intern == nil || outcome {
			d.last[f] = string(v)
		} else {
			d.last[f] = d.intern.get(v)
		}
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
