package replay

import (
	"fmt"
	"time"
)

// startProgress prints a progress line to o.Progress every
// o.ProgressEvery once the replay has run that long, and a last line when
// stopped (if it printed any); it returns the stop function.
func startProgress(o Options, dec, rep *streamReader) (stop func()) {
	if o.Progress == nil {
		return func() {}
	}
	start := o.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(o.ProgressEvery)
		defer t.Stop()
		printed := false
		for {
			select {
			case <-done:
				if printed {
					fmt.Fprintln(o.Progress, progressLine(dec, rep, o.Now().Sub(start)))
				}
				return
			case <-t.C:
				printed = true
				fmt.Fprintln(o.Progress, progressLine(dec, rep, o.Now().Sub(start)))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// progressLine is "replay: decisions 1200 of 4000 messages (30%), reports
// 50 of 120; 310000 events in 1s, 310000 events/s".
func progressLine(dec, rep *streamReader, elapsed time.Duration) string {
	evs := dec.evs.Load() + rep.evs.Load()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(evs) / s
	}
	return fmt.Sprintf("replay: decisions %s, reports %s; %d events in %s, %.0f events/s",
		streamProgress(dec), streamProgress(rep), evs, elapsed.Round(100*time.Millisecond), rate)
}

// streamProgress is "1200 of 4000 messages (30%)": messages read of the
// messages in range (the stream's sequences from the first read to the
// last when the replay started; other subjects of the stream count too).
func streamProgress(s *streamReader) string {
	n := s.msgs.Load()
	first := s.first.Load()
	if first == 0 || s.last < first {
		return fmt.Sprintf("%d messages", n)
	}
	total := s.last - first + 1
	return fmt.Sprintf("%d of %d messages (%.0f%%)", n, total, 100*float64(s.seq.Load()-first+1)/float64(total))
}
