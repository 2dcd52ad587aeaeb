package engine

import "github.com/tollgate-dev/tollgate/bucket"

// Trusted devices keep their own budget (7.1, `trusted_devices: own`).
//
// A limit with TrustedOwn gives a request that proves its device (a valid
// device token) and names an account a second bucket key: the limit's
// key plus the device. The store takes from it instead of the shared key
// when the device is in the account's trust set (riskd enrols a device
// there on a login_succeeded that presented its token), all in the
// decision's one store call; every other request, the attacker's among
// them, shares the limit's bucket. So draining an account's login budget
// never denies its owner's trusted device, whose own attempts stay bounded
// by the limit's rate and burst.

// appendOwnKey appends the own bucket of the limit whose bucket key was
// just appended (the last span), and, once per decision, the account's
// trust set that decides whether it is used.
func (d *Decision) appendOwnKey(prefix string, in *Input) {
	from := 0
	if n := len(d.spans); n > 1 {
		from = d.spans[n-2].end
	}
	end := len(d.keybuf)
	d.keybuf = append(d.keybuf, d.keybuf[from:end]...)
	d.keybuf = bucket.AppendOwnPart(d.keybuf, in.DeviceID)
	d.spans = append(d.spans, span{len(d.keybuf), spanOwn})
	for _, sp := range d.spans {
		if sp.kind == spanOwnTrust {
			return
		}
	}
	d.keybuf = bucket.AppendTrustKey(d.keybuf, prefix, "account", in.Account)
	d.spans = append(d.spans, span{len(d.keybuf), spanOwnTrust})
}
