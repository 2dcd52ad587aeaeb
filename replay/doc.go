// Package replay is `limiter replay`: it re-runs recorded traffic under a
// candidate policy and a baseline, and reports what changed and for whom
// (contract 6.11, docs/tuning.md).
//
// # Same code, event time
//
// Each policy gets a sim: the limiter's engine (package engine) over a
// bucket.MemoryStore whose clock is the time of the event being replayed,
// and riskd's risk engine (package signals) fed with the decisions that
// engine makes and the recorded reports; the locks and multipliers it sets
// are written to the same store by risk.WriteAction, as riskd writes them,
// so they apply to the following requests. Nothing here re-implements a
// semantic: a replay is the live system with the wall clock replaced by
// event time and riskd's delay by zero.
//
// # The record
//
// Run reads the decisions and reports streams with ephemeral ordered
// consumers (riskd's durable consumers are untouched), each through a
// reorder buffer that restores event-time order within a window (limiter
// hosts publish batches independently), and merges the two in event-time
// order, decisions before reports at equal times. Reports are read from a
// warm-up (the longest velocity window) before the first decision.
//
// # Determinism and bounds
//
// The report is a function of the record and the policies: the reorder
// buffer and the merge depend only on the sequence of events, the signals
// engine is deterministic, and every table is sorted before printing. The
// state is bounded as the daemons' is: each memory store by MaxKeys (the
// one source of approximation: past its bound it evicts, and the report
// says so), each risk engine by riskd's MaxKeys, the identity tables by
// MaxIdentities (beyond which identities are counted as untracked).
package replay
