package engine

import (
	"testing"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestKindsConvertByValue: the engine hands a limit's kind and calendar to
// the store by value (bucket knows no policy), so each policy value must be
// the bucket value of the same name.
func TestKindsConvertByValue(t *testing.T) {
	for _, k := range []policy.LimitKind{policy.KindBucket, policy.KindQuota, policy.KindConcurrency} {
		if got := bucket.Kind(k).String(); got != k.String() {
			t.Errorf("policy kind %s is bucket kind %s", k, got)
		}
	}
	for _, c := range []policy.Calendar{policy.Day, policy.Week, policy.Month} {
		if got := bucket.Calendar(c).String(); got != c.String() {
			t.Errorf("policy calendar %s is bucket calendar %s", c, got)
		}
	}
}
