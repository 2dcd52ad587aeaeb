// Package signals is Tollgate's abuse-signal logic: it turns the events the
// limiter publishes (decisions and reports) into actions for riskd to
// apply: locks and multipliers to write to Redis, alerts to publish.
//
// # Determinism
//
// The Engine is pure: it reads no clock, only event timestamps, and keeps
// no randomness (eviction is exact LRU over a linked list, never map
// order). Replaying the same events, in the same order, into a fresh Engine
// yields the same actions, alert ids included. Each event carries the
// JetStream stream sequence of its message and its index in the message's
// batch; a (seq, index) not after the last one processed is a redelivery
// and is ignored, so at-least-once delivery is applied exactly once.
//
// # Signals
//
// Velocity rules count reports of one type per key (account, ip, user or
// device) in a sliding window and fire on the report that brings the count
// to the threshold (the 10th failure of a threshold of 10). Firing clears
// the window and applies the rule's action (lockout, step_up, tighten) for
// its duration, escalated for repeats within 24 h when the rule says so;
// while that measure is in force the rule does not fire again for the key.
// A step_up_passed report lifts a step-up requirement the engine set.
//
// The anomaly detector compares, per key (usually device), the decision
// rate of the last short_window with the key's baseline: its rate over
// long_window excluding the short window, floored at min_baseline. It fires
// when the short rate reaches factor times the baseline. Each key costs two
// small rings of counters (1 s slots for the short window, long_window/60
// slots for the long one), a few hundred bytes.
//
// The repeat-offender counter counts denials (result limited) per (limit,
// key) in 1 s slots over the last minute. A key denied more than
// per_minute times in the minute is an offender; it is alerted once per
// episode, an episode ending after a full minute out of the list.
//
// Every structure is bounded by Options.MaxKeys and evicts its least
// recently seen key, so rotating through millions of device ids costs
// bounded memory. Keys that hold nothing useful any more are also swept,
// one per event, against the newest event time seen.
//
// docs/signals.md states the exact semantics, the approximations and the
// alert formats.
package signals
