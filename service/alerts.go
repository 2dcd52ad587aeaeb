package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/tollgate-dev/tollgate/alerting"
	"github.com/tollgate-dev/tollgate/policy"
)

// alertingCheck is the holder's Check of a daemon (contract 7.2): every
// webhook secret_env the policy names is set and non-empty in getenv,
// at start and at every reload ("FILE:LINE: ...", the reload refused).
func alertingCheck(getenv func(string) string) func(p *policy.Policy) error {
	return func(p *policy.Policy) error {
		if p == nil {
			return nil
		}
		return p.Alerting.CheckEnv(p.Source, getenv)
	}
}

// checkAlertingAtStart installs alertingCheck on h and runs it on the
// policy in force.
func checkAlertingAtStart(h *policy.Holder, getenv func(string) string) error {
	h.Check = alertingCheck(getenv)
	return h.Check(h.Current())
}

// newAlertDeliverer builds the alert deliverer of the risk component: it
// reads the alerts stream through one durable consumer per sink
// (<Durable>-alerts-<am|wh>-<hash>) and delivers as the policy's alerting section says, each attempt only
// while leading says this process may act (7.5).
func newAlertDeliverer(c riskConfig, leading func() bool) (*alerting.Deliverer, error) {
	return alerting.New(alerting.Options{
		JetStream: c.Publisher.JetStream(), Policy: c.Policy, Leading: leading, Streams: c.Streams, Durable: c.Durable + "-alerts",
		Getenv: c.Getenv, Metrics: alerting.NewMetrics(c.Registerer), Logger: c.Logger.With("component", "alerting"),
	})
}

// deliverAlerts runs d while ctx lives (the process leads): a deliverer
// that fails (its consumer deleted) is logged and started again a second
// later, never taking the risk daemon down (each sink resumes from its
// consumer's floor). The returned function stops
// it and waits until its deliveries have ended (those not done are handed
// back to the stream for the next leader).
func deliverAlerts(ctx context.Context, d *alerting.Deliverer, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			err := d.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			log.Error("alert delivery stopped; starting it again", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(alertRestartDelay):
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
