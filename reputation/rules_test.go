package reputation_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/tollgate-dev/tollgate/policy"
	"github.com/tollgate-dev/tollgate/reputation"
	"github.com/tollgate-dev/tollgate/reputation/reputationtest"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// contractRules are the rules of the contract's example policy.
func contractRules() *policy.Reputation {
	return &policy.Reputation{
		ASNDatabase: "GeoLite2-ASN.mmdb",
		Rules: []policy.ReputationRule{
			{ASNs: []uint32{16509, 14061}, Multiplier: 0.25, Reason: "datacenter", Line: 40},
			{CIDRs: prefixes("203.0.113.0/24"), Multiplier: 0.1, Reason: "vpn-farm", Line: 41},
		},
	}
}

// want is the expected Result, written compactly.
type want struct {
	asn       uint32
	org       string
	ip        float64
	ipRule    int
	asnMult   float64
	asnRule   int
	ipReason  string
	asnReason string
}

func checkResult(t *testing.T, r *reputation.Rules, ip string, w want) {
	t.Helper()
	got := r.Lookup(netip.MustParseAddr(ip))
	exp := reputation.Result{
		ASN: w.asn, HasASN: w.asn != 0, Org: w.org,
		IP: w.ip, IPRule: w.ipRule, IPReason: w.ipReason,
		ASNMult: w.asnMult, ASNRule: w.asnRule, ASNReason: w.asnReason,
	}
	if got != exp {
		t.Errorf("Lookup(%s) =\n  %+v\nwant\n  %+v", ip, got, exp)
	}
}

func TestRulesLookup(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	r := reputation.New(contractRules(), db)
	if !r.Active() {
		t.Error("Active() = false")
	}
	if got := r.Inactive(); got != nil {
		t.Errorf("Inactive() = %q with a database", got)
	}
	if r.DB() != db {
		t.Error("DB() is not the database given")
	}
	tests := []struct {
		ip   string
		want want
	}{
		// In both: the CIDR's 0.1 is the lowest for ip; the asn subject
		// gets only the ASN rule.
		{"203.0.113.7", want{16509, "AMAZON-02", 0.1, 1, 0.25, 0, "vpn-farm", "datacenter"}},
		// In the CIDR, outside the database.
		{"203.0.113.200", want{0, "", 0.1, 1, 1, -1, "vpn-farm", ""}},
		{"198.51.100.9", want{14061, "DIGITALOCEAN", 0.25, 0, 0.25, 0, "datacenter", "datacenter"}},
		{"::ffff:198.51.100.9", want{14061, "DIGITALOCEAN", 0.25, 0, 0.25, 0, "datacenter", "datacenter"}},
		{"192.0.2.1", want{0, "", 1, -1, 1, -1, "", ""}},
		// Known ASN that no rule names.
		{"10.1.2.3", want{64512, "PRIVATE-TEST", 1, -1, 1, -1, "", ""}},
		{"2001:db8:1::1", want{16509, "AMAZON-02", 0.25, 0, 0.25, 0, "datacenter", "datacenter"}},
		{"2001:db8:2::1", want{64496, "EXAMPLE-V6", 1, -1, 1, -1, "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			t.Parallel()
			checkResult(t, r, tc.ip, tc.want)
		})
	}
}

func TestRulesWithoutDB(t *testing.T) {
	t.Parallel()
	rep := contractRules()
	rep.Rules = append(rep.Rules, policy.ReputationRule{
		ASNs: []uint32{64512}, CIDRs: prefixes("192.0.2.0/24"), Multiplier: 0.5, Reason: "mixed", Line: 42,
	})
	r := reputation.New(rep, nil)
	if !r.Active() {
		t.Error("Active() = false: the CIDR rules still apply")
	}
	if r.DB() != nil {
		t.Error("DB() != nil")
	}
	wantInactive := []string{
		`reputation rule 1 (line 40, reason "datacenter"): asns [16509 14061] need risk.reputation.asn_database`,
		`reputation rule 3 (line 42, reason "mixed"): asns [64512] need risk.reputation.asn_database; its cidrs still apply`,
	}
	if got := r.Inactive(); !slices.Equal(got, wantInactive) {
		t.Errorf("Inactive() =\n  %q\nwant\n  %q", got, wantInactive)
	}
	tests := []struct {
		ip   string
		want want
	}{
		{"203.0.113.7", want{0, "", 0.1, 1, 1, -1, "vpn-farm", ""}},
		{"198.51.100.9", want{0, "", 1, -1, 1, -1, "", ""}},
		{"192.0.2.1", want{0, "", 0.5, 2, 1, -1, "mixed", ""}},
		{"10.1.2.3", want{0, "", 1, -1, 1, -1, "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			t.Parallel()
			checkResult(t, r, tc.ip, tc.want)
		})
	}

	onlyASN := reputation.New(&policy.Reputation{Rules: rep.Rules[:1]}, nil)
	if onlyASN.Active() {
		t.Error("ASN rules without a database: Active() = true")
	}
	if got := onlyASN.Inactive(); len(got) != 1 {
		t.Errorf("Inactive() = %q, want one rule", got)
	}
}

func TestRulesCombine(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	bonus := policy.ReputationRule{CIDRs: prefixes("198.51.100.0/24"), Multiplier: 2, Reason: "partner"}
	bigBonus := policy.ReputationRule{CIDRs: prefixes("198.51.100.0/25"), Multiplier: 3, Reason: "big-partner"}
	penalty := policy.ReputationRule{ASNs: []uint32{14061}, Multiplier: 0.5, Reason: "datacenter"}
	asnBonus := policy.ReputationRule{ASNs: []uint32{14061}, Multiplier: 4, Reason: "asn-partner"}
	block := policy.ReputationRule{CIDRs: prefixes("198.51.100.9/32"), Multiplier: 0, Reason: "blocked"}
	neutral := policy.ReputationRule{CIDRs: prefixes("198.51.100.0/24"), Multiplier: 1, Reason: "neutral"}
	tests := []struct {
		name  string
		rules []policy.ReputationRule
		ip    string
		want  want
	}{
		{"bonus alone", []policy.ReputationRule{bonus}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 2, 0, 1, -1, "partner", ""}},
		{"bonus and penalty", []policy.ReputationRule{bonus, penalty}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 0.5, 1, 0.5, 1, "datacenter", "datacenter"}},
		{"penalty listed first", []policy.ReputationRule{penalty, bonus}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 0.5, 0, 0.5, 0, "datacenter", "datacenter"}},
		{"two bonuses: the highest", []policy.ReputationRule{bonus, bigBonus}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 3, 1, 1, -1, "big-partner", ""}},
		{"outside the nested bonus", []policy.ReputationRule{bonus, bigBonus}, "198.51.100.200",
			want{14061, "DIGITALOCEAN", 2, 0, 1, -1, "partner", ""}},
		{"asn bonus and cidr bonus", []policy.ReputationRule{bonus, asnBonus}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 4, 1, 4, 1, "asn-partner", "asn-partner"}},
		{"zero blocks", []policy.ReputationRule{bonus, penalty, block}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 0, 2, 0.5, 1, "blocked", "datacenter"}},
		{"zero on another address", []policy.ReputationRule{bonus, penalty, block}, "198.51.100.10",
			want{14061, "DIGITALOCEAN", 0.5, 1, 0.5, 1, "datacenter", "datacenter"}},
		{"neutral rule", []policy.ReputationRule{neutral}, "198.51.100.9",
			want{14061, "DIGITALOCEAN", 1, 0, 1, -1, "neutral", ""}},
		{"same cidr twice: first rule on a tie", []policy.ReputationRule{
			{CIDRs: prefixes("198.51.100.0/24"), Multiplier: 0.5, Reason: "first"},
			{CIDRs: prefixes("198.51.100.0/24"), Multiplier: 0.5, Reason: "second"},
		}, "198.51.100.9", want{14061, "DIGITALOCEAN", 0.5, 0, 1, -1, "first", ""}},
		{"same asn twice", []policy.ReputationRule{
			{ASNs: []uint32{14061}, Multiplier: 0.5, Reason: "first"},
			{ASNs: []uint32{14061}, Multiplier: 0.2, Reason: "second"},
		}, "198.51.100.9", want{14061, "DIGITALOCEAN", 0.2, 1, 0.2, 1, "second", "second"}},
		{"rule with asns and cidrs, matched by cidr only", []policy.ReputationRule{
			{ASNs: []uint32{64512}, CIDRs: prefixes("198.51.100.0/24"), Multiplier: 0.3, Reason: "mixed"},
		}, "198.51.100.9", want{14061, "DIGITALOCEAN", 0.3, 0, 1, -1, "mixed", ""}},
		{"rule with asns and cidrs, matched by asn only", []policy.ReputationRule{
			{ASNs: []uint32{64512}, CIDRs: prefixes("198.51.100.0/24"), Multiplier: 0.3, Reason: "mixed"},
		}, "10.0.0.1", want{64512, "PRIVATE-TEST", 0.3, 0, 0.3, 0, "mixed", "mixed"}},
		{"ipv4-mapped cidr", []policy.ReputationRule{
			{CIDRs: prefixes("::ffff:198.51.100.0/120"), Multiplier: 0.7, Reason: "mapped"},
		}, "198.51.100.9", want{14061, "DIGITALOCEAN", 0.7, 0, 1, -1, "mapped", ""}},
		{"ipv6 cidr does not match ipv4", []policy.ReputationRule{
			{CIDRs: prefixes("::/0"), Multiplier: 0.7, Reason: "all-v6"},
		}, "198.51.100.9", want{14061, "DIGITALOCEAN", 1, -1, 1, -1, "", ""}},
		{"ipv6 cidr", []policy.ReputationRule{
			{CIDRs: prefixes("::/0"), Multiplier: 0.7, Reason: "all-v6"},
			{CIDRs: prefixes("2001:db8:1::/48"), Multiplier: 0.6, Reason: "v6-net"},
		}, "2001:db8:1::9", want{16509, "AMAZON-02", 0.6, 1, 1, -1, "v6-net", ""}},
		{"whole ipv4 space", []policy.ReputationRule{
			{CIDRs: prefixes("0.0.0.0/0"), Multiplier: 0.9, Reason: "everyone"},
		}, "255.255.255.255", want{0, "", 0.9, 0, 1, -1, "everyone", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := reputation.New(&policy.Reputation{Rules: tc.rules}, db)
			checkResult(t, r, tc.ip, tc.want)
		})
	}
}

func TestRulesNeutral(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, reputationtest.StandardEntries())
	neutral := reputation.Result{IP: 1, IPRule: -1, ASNMult: 1, ASNRule: -1}
	tests := []struct {
		name       string
		rules      *reputation.Rules
		ip         netip.Addr
		want       reputation.Result
		wantActive bool
	}{
		{"nil rules", nil, netip.MustParseAddr("203.0.113.7"), neutral, false},
		{"no section, no database", reputation.New(nil, nil), netip.MustParseAddr("203.0.113.7"), neutral, false},
		{"invalid address", reputation.New(contractRules(), db), netip.Addr{}, neutral, true},
		{
			// The asn key part needs the ASN even without rules.
			"no section, database", reputation.New(nil, db), netip.MustParseAddr("203.0.113.7"),
			reputation.Result{ASN: 16509, HasASN: true, Org: "AMAZON-02", IP: 1, IPRule: -1, ASNMult: 1, ASNRule: -1},
			false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.rules.Lookup(tc.ip); got != tc.want {
				t.Errorf("Lookup = %+v, want %+v", got, tc.want)
			}
			if got := tc.rules.Active(); got != tc.wantActive {
				t.Errorf("Active() = %v, want %v", got, tc.wantActive)
			}
			if got := tc.rules.Inactive(); got != nil {
				t.Errorf("Inactive() = %q", got)
			}
		})
	}
}

// TestRulesFollowReload checks that compiled rules see the database's hot
// reloads.
func TestRulesFollowReload(t *testing.T) {
	t.Parallel()
	db, path := openDB(t, reputationtest.StandardEntries())
	r := reputation.New(contractRules(), db)
	checkResult(t, r, "203.0.113.7", want{16509, "AMAZON-02", 0.1, 1, 0.25, 0, "vpn-farm", "datacenter"})
	replace(t, path, movedEntries(), 1)
	if changed, err := db.Reload(); !changed || err != nil {
		t.Fatalf("Reload = %v, %v", changed, err)
	}
	checkResult(t, r, "203.0.113.7", want{64500, "MOVED", 0.1, 1, 1, -1, "vpn-farm", ""})
	if got := r.Rules(); len(got) != 2 || got[1].Reason != "vpn-farm" {
		t.Errorf("Rules() = %+v", got)
	}
}
