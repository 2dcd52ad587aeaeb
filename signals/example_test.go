package signals_test

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/signals"
	"github.com/tollgate-dev/tollgate/streams"
)

func ExampleEngine_ApplyReport() {
	e := signals.New(signals.Options{Risk: policy.Risk{Velocity: []policy.VelocityRule{{
		Name: "account-failures", Event: "login_failed", By: policy.PartAccount,
		Threshold: 3, Window: 10 * time.Minute, Action: "lockout", Duration: 15 * time.Minute,
	}}}})
	start := time.Date(2024, 4, 19, 10, 0, 0, 0, time.UTC)
	var acts []signals.Action
	for i := range 3 {
		r := &streams.Report{Type: "login_failed", Account: "alice", TS: start.Add(time.Duration(i) * time.Second)}
		acts = e.ApplyReport(uint64(100+i), 0, r, acts)
	}
	for _, a := range acts {
		switch a.Kind {
		case signals.SetLock:
			fmt.Println("lock", a.Subject, a.ID, a.Lock.Kind, "until", a.Lock.Until.Format(time.RFC3339))
		case signals.Alert:
			fmt.Println("alert", a.Alert.ID)
			fmt.Println(a.Alert.Reason)
		}
	}
	// Output:
	// lock account alice lockout until 2024-04-19T10:15:02Z
	// alert lockout:account-failures:account:alice:1713520802000
	// account alice: 3 login_failed in 10m (threshold 3, rule account-failures); locked out for 15m
}
