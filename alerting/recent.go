package alerting

import "time"

// Record is the outcome of one delivery attempt, as Recent lists it (for
// a console or an operator's API).
type Record struct {
	// At is when the attempt ended.
	At time.Time `json:"at"`
	// DeliveryID is the delivery's id (the receivers' dedupe key).
	DeliveryID string `json:"delivery_id"`
	// Kind, Subject and ID are the alert's.
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	ID      string `json:"id"`
	// Sink is "alertmanager" or "webhooks[N]".
	Sink string `json:"sink"`
	// Result is delivered, retried or failed (given up).
	Result string `json:"result"`
	// Attempt is the attempt's number, from 1.
	Attempt int `json:"attempt"`
	// Folded is how many alerts the delivery stands for.
	Folded int `json:"folded"`
	// Error is why the attempt failed ("" when delivered).
	Error string `json:"error,omitempty"`
}

// record counts an attempt's result and remembers it for Recent.
func (d *Deliverer) record(s sink, dl Delivery, result string, attempt int, err error) {
	d.o.Metrics.Deliveries.WithLabelValues(s.name(), result).Inc()
	r := Record{At: d.o.Now(), DeliveryID: dl.ID, Kind: dl.Alert.Kind, Subject: dl.Alert.Subject, ID: dl.Alert.SubjectID,
		Sink: s.name(), Result: result, Attempt: attempt, Folded: dl.Folded}
	if err != nil {
		r.Error = err.Error()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.recent) < recentRecords {
		d.recent = append(d.recent, r)
	} else {
		d.recent[d.next] = r
	}
	d.next = (d.next + 1) % recentRecords
}

// Recent returns the outcomes of the last attempts (at most 100), newest
// first. It is safe to call from any goroutine.
func (d *Deliverer) Recent() []Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Record, 0, len(d.recent))
	for i := range len(d.recent) {
		out = append(out, d.recent[(d.next-1-i+recentRecords)%recentRecords])
	}
	return out
}
