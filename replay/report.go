package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// TopN is how many identities the report lists in each identity table.
const TopN = 10

// Report is what a replay found. The same record and policies give the
// same Report, and the same bytes from WriteMarkdown and WriteJSON.
type Report struct {
	// Candidate and Baseline name the policies (file paths as given, or
	// "built-in example policy").
	Candidate string `json:"candidate"`
	Baseline  string `json:"baseline"`
	// Record describes what was replayed.
	Record Record `json:"record"`
	// Total counts every decision; Classes per route class; Limits per
	// route class and limit (or velocity rule, for lockouts and step-ups).
	Total   Row   `json:"total"`
	Classes []Row `json:"classes"`
	Limits  []Row `json:"limits"`
	// Measures counts the risk engine's alerts per rule under each policy.
	Measures []Measure `json:"measures"`
	// MostAffected lists the TopN identities with the most decisions that
	// changed (newly denied + newly allowed), most first.
	MostAffected []Identity `json:"most_affected"`
	// LikelyFalsePositives lists the TopN identities, most newly denied
	// first, newly denied under the candidate although the record shows them
	// logging in successfully or presenting a valid device token;
	// FalsePositiveIdentities and FalsePositiveDenials count all of them.
	LikelyFalsePositives    []Identity `json:"likely_false_positives"`
	FalsePositiveIdentities int64      `json:"false_positive_identities"`
	FalsePositiveDenials    int64      `json:"false_positive_denials"`
	// Bounds says where the replay's bounded state overflowed: identities
	// not tracked (not in the identity tables), and whether a memory store
	// reached its bound (then buckets were evicted and counts are approximate).
	Bounds Bounds `json:"bounds"`
}

// Record describes the replayed record.
type Record struct {
	// Decisions and Reports are the events replayed; Skipped the events
	// that could not be decoded or evaluated.
	Decisions int64 `json:"decisions"`
	Reports   int64 `json:"reports"`
	Skipped   int64 `json:"skipped"`
	// AdminChanges is how many changes of the audit stream (multipliers
	// set and cleared by hand, lockouts lifted, trust revoked,
	// attestations forgotten) were applied, each at its time.
	AdminChanges int64 `json:"admin_changes"`
	// TrustedDevices is how many trusted devices in force at the start
	// were read from riskd's trust journal.
	TrustedDevices int64 `json:"trusted_devices_seeded"`
	// From and To are the first and last event times (zero when empty).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// FirstSeq and LastSeq are the decisions stream's sequence range read
	// (0 when not read from JetStream).
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// Bounds reports overflowed state.
type Bounds struct {
	UntrackedIdentities int64 `json:"untracked_identities"`
	UntrackedGood       int64 `json:"untracked_good_identities"`
	StoreFull           bool  `json:"store_full"`
	// DroppedAdminChanges counts the oldest admin changes not applied
	// (Limits.MaxAdminChanges), DroppedTrustedDevices the journaled
	// enrolments not read (past SignalKeys, the trust record's bound).
	DroppedAdminChanges   int64 `json:"dropped_admin_changes"`
	DroppedTrustedDevices int64 `json:"dropped_trusted_devices"`
}

// build turns the tally into a Report.
func (t *tally) build() *Report {
	r := &Report{Record: Record{Decisions: t.decisions, Reports: t.reports, Skipped: t.skipped, AdminChanges: t.admin, TrustedDevices: t.seeded}}
	r.Total = t.total.public()
	for _, c := range t.classes {
		r.Classes = append(r.Classes, c.public())
	}
	for _, l := range t.rows {
		r.Limits = append(r.Limits, l.public())
	}
	byRow := func(a, b Row) int {
		if c := cmp.Compare(a.Class, b.Class); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Limit, b.Limit); c != 0 {
			return c
		}
		return cmp.Compare(a.Kind, b.Kind)
	}
	slices.SortFunc(r.Classes, byRow)
	slices.SortFunc(r.Limits, byRow)
	for _, m := range t.measures {
		r.Measures = append(r.Measures, *m)
	}
	slices.SortFunc(r.Measures, func(a, b Measure) int {
		if c := cmp.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		if a.Shadow != b.Shadow {
			return b2i(a.Shadow) - b2i(b.Shadow)
		}
		return 0
	})
	var affected, fps []Identity
	for kind, ids := range t.ids {
		for id, x := range ids {
			g := t.good[kind][id]
			x.LoggedIn, x.ValidDeviceToken = g&goodLogin != 0, g&goodToken != 0
			if x.NewlyDenied+x.NewlyAllowed > 0 {
				affected = append(affected, *x)
			}
			if x.NewlyDenied > 0 && g != 0 {
				fps = append(fps, *x)
				r.FalsePositiveIdentities++
				r.FalsePositiveDenials += x.NewlyDenied
			}
		}
	}
	slices.SortFunc(affected, func(a, b Identity) int {
		return cmpIdentity(a.NewlyDenied+a.NewlyAllowed, b.NewlyDenied+b.NewlyAllowed, a, b)
	})
	slices.SortFunc(fps, func(a, b Identity) int { return cmpIdentity(a.NewlyDenied, b.NewlyDenied, a, b) })
	r.MostAffected = nonNil(affected[:min(len(affected), TopN)])
	r.LikelyFalsePositives = nonNil(fps[:min(len(fps), TopN)])
	r.Classes, r.Limits, r.Measures = nonNil(r.Classes), nonNil(r.Limits), nonNil(r.Measures)
	r.Bounds = Bounds{UntrackedIdentities: t.untrackedIDs, UntrackedGood: t.untrackedGood}
	return r
}

// cmpIdentity orders by key descending, then subject, then id.
func cmpIdentity(ka, kb int64, a, b Identity) int {
	if ka != kb {
		return cmp.Compare(kb, ka)
	}
	if c := cmp.Compare(a.Subject, b.Subject); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteJSON writes r as one JSON object and a newline.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("replay: encode report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteMarkdown writes r as a Markdown document.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Replay: %s against %s\n\n", policyName(r.Candidate), policyName(r.Baseline))
	rec := r.Record
	fmt.Fprintf(&b, "%d decisions and %d reports", rec.Decisions, rec.Reports)
	if !rec.From.IsZero() {
		fmt.Fprintf(&b, " from %s to %s", rec.From.UTC().Format(time.RFC3339Nano), rec.To.UTC().Format(time.RFC3339Nano))
	}
	if rec.LastSeq > 0 {
		fmt.Fprintf(&b, " (decisions stream sequences %d-%d)", rec.FirstSeq, rec.LastSeq)
	}
	b.WriteString(".")
	if rec.TrustedDevices > 0 {
		fmt.Fprintf(&b, " %d trusted devices in force at the start were read from riskd's trust journal.", rec.TrustedDevices)
	}
	if rec.AdminChanges > 0 {
		fmt.Fprintf(&b, " %d admin changes (audit stream) were applied at their times.", rec.AdminChanges)
	}
	if rec.Skipped > 0 {
		fmt.Fprintf(&b, " %d events could not be decoded or evaluated and were skipped.", rec.Skipped)
	}
	b.WriteString("\n\n")
	r.writeBounds(&b)

	b.WriteString("## Decisions per route class\n\n")
	b.WriteString("| class | requests | denied (baseline) | denied (candidate) | newly denied | newly allowed |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, c := range append(slices.Clone(r.Classes), r.Total) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d |\n", cell(c.Class), c.Requests, c.DeniedBaseline, c.DeniedCandidate, c.NewlyDenied, c.NewlyAllowed)
	}
	b.WriteString("\n## Per limit and route class\n\n")
	b.WriteString("A request denied by several limits counts under each; lockouts and step-ups count under their velocity rule. Kind: bucket, quota or concurrency for a limit, lockout or step_up for a velocity rule, list for an allow or deny list.\n\n")
	b.WriteString("| class | limit | kind | requests | denied (baseline) | denied (candidate) | newly denied | newly allowed |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, l := range r.Limits {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %d |\n", cell(l.Class), cell(l.Limit), l.Kind, l.Requests, l.DeniedBaseline, l.DeniedCandidate, l.NewlyDenied, l.NewlyAllowed)
	}
	b.WriteString("\n## Risk rules: lockouts, step-ups and throttles each policy would have set\n\n")
	if len(r.Measures) == 0 {
		b.WriteString("No risk rule fired under either policy.\n")
	} else {
		b.WriteString("| rule | kind | baseline | candidate |\n| --- | --- | ---: | ---: |\n")
		for _, m := range r.Measures {
			kind := m.Kind
			if m.Shadow {
				kind += " (shadow: alert only)"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d |\n", cell(m.Rule), cell(kind), m.Baseline, m.Candidate)
		}
	}
	r.writeNamed(&b)
	fmt.Fprintf(&b, "\n## The %d identities most affected\n\n", TopN)
	writeIdentities(&b, r.MostAffected, "No decision changed.")
	b.WriteString("\n## Likely false positives\n\n")
	fmt.Fprintf(&b, "Identities newly denied under the candidate that the record shows logging in successfully or presenting a valid device token (identities: %d, new denials: %d).\n\n",
		r.FalsePositiveIdentities, r.FalsePositiveDenials)
	writeIdentities(&b, r.LikelyFalsePositives, "None.")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeNamed writes, per candidate rule and kind, the subjects its
// lockouts, step-ups, tightenings and blocks would have been set on.
func (r *Report) writeNamed(b *strings.Builder) {
	b.WriteString("\n## Who the candidate's rules would have locked out, stepped up, tightened or blocked\n\n")
	n := 0
	for _, m := range r.Measures {
		if len(m.Named) == 0 {
			continue
		}
		if n++; n > 1 {
			b.WriteString("\n")
		}
		kind := m.Kind
		if m.Shadow {
			kind += ", shadow: alert only"
		}
		fmt.Fprintf(b, "### %s (%s): %d\n\n", cell(m.Rule), kind, m.Candidate)
		b.WriteString("| subject | id | at | until |\n| --- | --- | --- | --- |\n")
		for _, x := range m.Named {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(x.Subject), cell(x.ID),
				x.At.Format(time.RFC3339Nano), x.Until.Format(time.RFC3339Nano))
		}
		if more := m.Candidate - int64(len(m.Named)); more > 0 {
			fmt.Fprintf(b, "\nand %d more (the first %d are named).\n", more, MaxNamed)
		}
	}
	if n == 0 {
		b.WriteString("None.\n")
	}
}

func (r *Report) writeBounds(b *strings.Builder) {
	bd := r.Bounds
	if bd.UntrackedIdentities > 0 || bd.UntrackedGood > 0 {
		fmt.Fprintf(b, "Note: the identity tables were full; %d identity counts and %d login or token records were not tracked (raise --max-identities).\n\n",
			bd.UntrackedIdentities, bd.UntrackedGood)
	}
	if bd.DroppedAdminChanges > 0 {
		fmt.Fprintf(b, "Note: the audit stream held more admin changes than the replay keeps; the oldest %d were not applied (raise --max-admin-changes).\n\n",
			bd.DroppedAdminChanges)
	}
	if bd.DroppedTrustedDevices > 0 {
		fmt.Fprintf(b, "Note: riskd's trust journal held more enrolments than the replay keeps; %d were not read.\n\n", bd.DroppedTrustedDevices)
	}
	if bd.StoreFull {
		b.WriteString("Note: a replay memory store reached its bound and evicted buckets; counts are approximate (raise --max-keys).\n\n")
	}
}

func writeIdentities(b *strings.Builder, ids []Identity, empty string) {
	if len(ids) == 0 {
		b.WriteString(empty + "\n")
		return
	}
	b.WriteString("| subject | id | denied (baseline) | denied (candidate) | newly denied | newly allowed | logged in | valid device token |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, x := range ids {
		fmt.Fprintf(b, "| %s | %s | %d | %d | %d | %d | %s | %s |\n", x.Subject, cell(x.ID),
			x.DeniedBaseline, x.DeniedCandidate, x.NewlyDenied, x.NewlyAllowed, yesNo(x.LoggedIn), yesNo(x.ValidDeviceToken))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// policyName renders a policy's name: a file as code, the built-in one as words.
func policyName(s string) string {
	if s == BuiltinName || s == "" {
		return "the " + BuiltinName
	}
	return code(s)
}

// cell renders s in a table cell: as code, with pipes and line breaks escaped.
func cell(s string) string {
	if s == "" {
		return ""
	}
	return code(s)
}

// code renders s as inline code, safe in a table cell.
func code(s string) string {
	s = strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ", "`", "'").Replace(s)
	return "`" + s + "`"
}
