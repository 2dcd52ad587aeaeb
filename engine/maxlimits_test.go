package engine

import (
	"testing"

	"github.com/tollgate-dev/tollgate/bucket"
	"github.com/tollgate-dev/tollgate/policy"
)

// TestMaxApplicableIsMaxLimits: the cap policy.Parse holds a request's
// limits to is the most one decision checks, so appendLimits never cuts
// a parsed policy's limits.
func TestMaxApplicableIsMaxLimits(t *testing.T) {
	t.Parallel()
	if policy.MaxApplicable != bucket.MaxLimits {
		t.Errorf("policy.MaxApplicable = %d, bucket.MaxLimits = %d: want them equal", policy.MaxApplicable, bucket.MaxLimits)
	}
}
