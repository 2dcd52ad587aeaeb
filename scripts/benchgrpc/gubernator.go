package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// The gubernator path sends the same four limits to gubernator
// (github.com/gubernator-io/gubernator/v2, scripts/bench-peers' third
// peer) through its gRPC API, V1.GetRateLimits, as four token buckets in
// one call: ip, route, user and device, with scripts/bench-policy.yaml's
// rates. Its messages are few and small, so they are encoded here with
// protowire (the protobuf wire format's primitives, already a dependency)
// rather than by importing gubernator's module and everything it pulls
// in; grpc-go carries them as raw bytes (rawCodec).
const gubernatorMethod = "/pb.gubernator.V1/GetRateLimits"

// gubernatorRequest encodes the GetRateLimitsReq of one key's decision.
func gubernatorRequest(ip, user, dev string) []byte {
	var b []byte
	for _, l := range []struct {
		name, key string
		limit     int64
	}{{"ip", ip, 100000}, {"route", "POST /bench", 10000000}, {"user", user, 100000}, {"device", dev, 100000}} {
		var r []byte
		r = protowire.AppendTag(r, 1, protowire.BytesType) // name
		r = protowire.AppendString(r, l.name)
		r = protowire.AppendTag(r, 2, protowire.BytesType) // unique_key
		r = protowire.AppendString(r, l.key)
		r = protowire.AppendTag(r, 3, protowire.VarintType) // hits
		r = protowire.AppendVarint(r, 1)
		r = protowire.AppendTag(r, 4, protowire.VarintType) // limit
		r = protowire.AppendVarint(r, uint64(l.limit))
		r = protowire.AppendTag(r, 5, protowire.VarintType) // duration, ms
		r = protowire.AppendVarint(r, 1000)
		r = protowire.AppendTag(r, 8, protowire.VarintType) // burst
		r = protowire.AppendVarint(r, uint64(l.limit))
		// algorithm (6) TOKEN_BUCKET and behavior (7) BATCHING are 0: omitted
		b = protowire.AppendTag(b, 1, protowire.BytesType) // requests
		b = protowire.AppendBytes(b, r)
	}
	return b
}

// gubernatorDenied reads a GetRateLimitsResp: whether a limit was over
// (status 1), or the error one of its answers carries.
func gubernatorDenied(b []byte) (bool, error) {
	denied, n := false, 0
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false, protowire.ParseError(k)
		}
		b = b[k:]
		if num != 1 || typ != protowire.BytesType {
			if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
				return false, protowire.ParseError(k)
			}
			b = b[k:]
			continue
		}
		r, k := protowire.ConsumeBytes(b)
		if k < 0 {
			return false, protowire.ParseError(k)
		}
		b = b[k:]
		n++
		over, msg, err := gubernatorAnswer(r)
		if err != nil {
			return false, err
		}
		if msg != "" {
			return false, fmt.Errorf("gubernator: %s", msg)
		}
		denied = denied || over
	}
	if n != 4 {
		return false, fmt.Errorf("gubernator: %d answers for 4 limits", n)
	}
	return denied, nil
}

// gubernatorAnswer reads one RateLimitResp: status OVER_LIMIT and error.
func gubernatorAnswer(b []byte) (over bool, msg string, err error) {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return false, "", protowire.ParseError(k)
		}
		b = b[k:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return false, "", protowire.ParseError(k)
			}
			over, b = v == 1, b[k:]
		case num == 5 && typ == protowire.BytesType:
			s, k := protowire.ConsumeString(b)
			if k < 0 {
				return false, "", protowire.ParseError(k)
			}
			msg, b = s, b[k:]
		default:
			if k = protowire.ConsumeFieldValue(num, typ, b); k < 0 {
				return false, "", protowire.ParseError(k)
			}
			b = b[k:]
		}
	}
	return over, msg, nil
}

// rawCodec hands grpc-go messages already encoded (*[]byte both ways).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" } // on the wire it is protobuf

// gubernatorPath returns the gubernator path's doFunc: the pool's keys
// over -grpc-conns connections to -grpc, as the grpc path sends them.
func gubernatorPath(cfg config) (doFunc, error) {
	reqs := make([][]byte, cfg.pool)
	for i := range reqs {
		reqs[i] = gubernatorRequest(key(cfg.mode, i))
	}
	conns, err := dial(cfg, grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, err
	}
	var next atomic.Uint64
	return func(ctx context.Context, i int) (bool, error) {
		ctx, cancel := callContext(ctx, cfg)
		defer cancel()
		var resp []byte
		if err := conns[next.Add(1)%uint64(len(conns))].Invoke(ctx, gubernatorMethod, &reqs[i], &resp); err != nil {
			return false, err
		}
		return gubernatorDenied(resp)
	}, nil
}
