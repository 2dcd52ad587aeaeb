package streams

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/internal/jsonw"
)

// AppendDecisionBatch appends the JSON of b to dst, byte for byte what
// json.Marshal(b) writes, without reflection: the publisher encodes every
// decision on the limiter's hot path. Values encoding/json would refuse
// or that this encoder leaves to it (a time outside years 0-9999 or not
// in UTC, a NaN or infinite cost) are encoded by
// encoding/json, whose error is returned.
func AppendDecisionBatch(dst []byte, b *DecisionBatch) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(b.V), 10)
	dst = append(dst, `,"decisions":`...)
	if b.Decisions == nil {
		return append(dst, "null}"...), nil
	}
	dst = append(dst, '[')
	for i := range b.Decisions {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendDecision(dst, &b.Decisions[i]); !ok {
			data, err := json.Marshal(b)
			return append(dst[:start], data...), err
		}
	}
	return append(dst, "]}"...), nil
}

// appendOneDecision appends d's JSON to dst, as json.Marshal writes it
// inside a batch; what appendDecision leaves to encoding/json is encoded
// by it, and its error returned.
func appendOneDecision(dst []byte, d *Decision) ([]byte, error) {
	start := len(dst)
	if out, ok := appendDecision(dst, d); ok {
		return out, nil
	}
	data, err := json.Marshal(d)
	return append(dst[:start], data...), err
}

// appendDecision appends d's JSON in the order of its fields; it reports
// false for what it leaves to encoding/json.
func appendDecision(b []byte, d *Decision) ([]byte, bool) {
	if y := d.TS.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := d.TS.Zone(); off != 0 {
		return b, false // events are UTC; encoding/json judges other offsets
	}
	b = append(b, `{"ts":"`...)
	b = d.TS.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = jsonw.AppendString(b, d.RequestID)
	b = append(b, `,"endpoint":`...)
	b = jsonw.AppendString(b, d.Endpoint)
	b = append(b, `,"class":`...)
	b = jsonw.AppendString(b, d.Class)
	if d.Route != "" {
		b = append(b, `,"route":`...)
		b = jsonw.AppendString(b, d.Route)
	}
	b = append(b, `,"limit":`...)
	b = jsonw.AppendString(b, d.Limit)
	if d.Kind != "" {
		b = append(b, `,"kind":`...)
		b = jsonw.AppendString(b, d.Kind)
	}
	b = append(b, `,"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"result":`...)
	b = jsonw.AppendString(b, d.Result)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = appendKeyParts(b, d)
	if len(d.Attributes) > 0 {
		b = append(b, `,"attributes":`...)
		b = appendAttributes(b, d.Attributes)
	}
	b = append(b, `,"cost":`...)
	b, ok := jsonw.AppendFloat(b, d.Cost)
	if d.LeaseID != "" {
		b = append(b, `,"lease_id":`...)
		b = jsonw.AppendString(b, d.LeaseID)
	}
	return append(b, '}'), ok
}

// appendKeyParts appends d's key parts and device_verified.
func appendKeyParts(b []byte, d *Decision) []byte {
	b = append(b, `,"ip":`...)
	b = jsonw.AppendString(b, d.IP)
	b = append(b, `,"asn":`...)
	b = jsonw.AppendString(b, d.ASN)
	b = append(b, `,"user_id":`...)
	b = jsonw.AppendString(b, d.UserID)
	b = append(b, `,"device_id":`...)
	b = jsonw.AppendString(b, d.DeviceID)
	b = append(b, `,"account":`...)
	b = jsonw.AppendString(b, d.Account)
	if d.DeviceVerified {
		b = append(b, `,"device_verified":true`...)
	}
	if d.AttestationBudget {
		b = append(b, `,"attestation_budget":true`...)
	}
	return b
}

// appendAttributes appends m as encoding/json does: keys sorted.
func appendAttributes(b []byte, m map[string]string) []byte {
	var small [8]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, k)
		b = append(b, ':')
		b = jsonw.AppendString(b, m[k])
	}
	return append(b, '}')
}
